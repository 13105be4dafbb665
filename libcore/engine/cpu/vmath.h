/* vmath.h - let gcc vectorise expf/logf/tanhf/erff inside `omp simd` loops.
 *
 * glibc ships SIMD versions of these (libmvec, within 4 ulp) but declares
 * them only under -ffast-math. Declaring them here, for OpenMP builds on
 * x86-64 glibc, makes the compiler call the vector versions in loops marked
 * `#pragma omp simd`. libmvec comes in with -lm. Include it in kernel
 * sources only. */
#ifndef COL_VMATH_H
#define COL_VMATH_H

#include <math.h>

#if defined(_OPENMP) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float erff(float);
#endif
#endif

#endif
