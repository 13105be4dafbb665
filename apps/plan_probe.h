/* plan_probe.h - stub */
#ifndef COL_APPS_PLAN_PROBE_H
#define COL_APPS_PLAN_PROBE_H
#endif
