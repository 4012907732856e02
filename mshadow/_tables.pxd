# The generated mshadow/dtypes_gen.h (codegen_types.py) as Cython sees it: the dtype and
# reducer tables of dtypes.py and readers.py by name, so no compiled code restates their
# numbers. _core.pyx checks at import that the header's values agree with the Python tables.

cdef extern from "mshadow/dtypes_gen.h":
    enum:
        MS_TYPEFLAG_FLOAT32
        MS_TYPEFLAG_FLOAT64
        MS_TYPEFLAG_FLOAT16
        MS_TYPEFLAG_UINT8
        MS_TYPEFLAG_INT32
        MS_TYPEFLAG_INT8
        MS_TYPEFLAG_INT64
        MS_NUM_TYPEFLAGS
    enum:
        MS_RED_SUM
        MS_RED_MAXIMUM
        MS_RED_MINIMUM
    ctypedef struct ms_dtype_row:
        int flag
        const char *code
        const char *name
        int size
        int is_float
    const ms_dtype_row ms_dtype_table[]
    ctypedef struct ms_reducer_row:
        const char *name
        int id
    const ms_reducer_row ms_reducer_table[]
