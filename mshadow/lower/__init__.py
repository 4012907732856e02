"""Lowerings of the IR (mshadow/ir.py), one module per device.

``lower.cpu`` turns a node into a register program that the compiled executor runs
(mshadow/_engine.pxi, include/mshadow/plan_exec.h):

    ir node  --cpu.compile_plan-->  Program (instructions over registers, leaves, scalars)
             --_core.Plan-->        bound kernel pointers  --run_plan-->  the C executor

Its kernels are generated at build time by mshadow/codegen_cpu.py from
mshadow/ops_table.py and mshadow/vmath.py. A CUDA lowering is the next module here.
"""
