/* One vendored library source as its own compilation unit (see README.md): the
 * library's code is compiled as its authors ship it, without the warnings that
 * aioproducer's own flags (-Wconversion) turn on for our code. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "lz4/lz4.c"
