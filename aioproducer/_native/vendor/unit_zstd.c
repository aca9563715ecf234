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
/* zstd's single-file build turns on its multithreaded compression (ZSTD_MULTITHREAD),
 * which the compression thread never uses (one worker of its own, nbWorkers 0). Its
 * two pthread calls are renamed to stubs that fail: pthread_create and pthread_join
 * are versioned GLIBC_2.34, and linking them would make the wheel manylinux_2_34. */
#define pthread_create aiop_zstd_pthread_create_unused
#define pthread_join aiop_zstd_pthread_join_unused
#include "zstd/zstd.c"
#undef pthread_create
#undef pthread_join

#include <errno.h>

int aiop_zstd_pthread_create_unused(pthread_t* thread, const pthread_attr_t* attr,
                                    void* (*start)(void*), void* arg)
{
    (void)thread; (void)attr; (void)start; (void)arg;
    return EAGAIN;  /* zstd reports it as a failed context: never reached */
}

int aiop_zstd_pthread_join_unused(pthread_t thread, void** ret)
{
    (void)thread; (void)ret;
    return EINVAL;
}
