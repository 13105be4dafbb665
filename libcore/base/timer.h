/* timer.h - the monotonic clock, in seconds (for step-time splits, tracers
 * and progress lines; never for the results of a computation). */
#ifndef COL_TIMER_H
#define COL_TIMER_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double col_seconds(void);

#endif
