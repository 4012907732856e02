"""benchmarks/bench_gpu.py --smoke on the device in use (the emulated one in CI): every case
of its ops table runs, each checking its values (numpy, the CPU's conv2d) before timing, so
the benchmark a device session runs is known to work before one is lent."""
import importlib.util
import os

from gpu_testing import gpu_device  # noqa: F401  (autouse)

HERE = os.path.dirname(os.path.abspath(__file__))


def test_every_ops_case_runs_and_checks_its_values(capsys):
    path = os.path.join(HERE, "..", "..", "benchmarks", "bench_gpu.py")
    spec = importlib.util.spec_from_file_location("bench_gpu", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["sum(x*x)", "softmax", "gemm", "gemm", "conv2d",
                                               "conv2d", "conv2d", "sort_by_key"]
    assert all("mshadow" in ln for ln in lines)
