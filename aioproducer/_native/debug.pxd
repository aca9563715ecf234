# The build-time debug switch, visible to Cython code.
#
# `AIOPRODUCER_DEBUG=1 pip install -e .` defines the C macro AIOPRODUCER_DEBUG
# (see setup.py).  Code guarded by `if AIOP_DEBUG:` is then compiled in; in a
# normal build AIOP_DEBUG is the constant 0 and the C compiler removes those
# blocks entirely, so extra checks cost nothing in production.

cdef extern from *:
    """
    #ifdef AIOPRODUCER_DEBUG
    #define AIOP_DEBUG 1
    #else
    #define AIOP_DEBUG 0
    #endif
    """
    # 1 in a debug build, 0 otherwise (a compile-time constant).
    const int AIOP_DEBUG
