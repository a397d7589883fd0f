/* A stand-in for libnvidia-ml.so.1 exporting the NVML calls the agent makes, with the
 * real signatures: two GPUs named "Fake GPU 80GB" with 80 GiB each.
 *
 * FAKE_NVML_CTL=<dir>: read on every call, `free_pct` (free memory in percent of total,
 * default 25) and `util_pct` (kernel utilization in percent, default 0); and GPU 1's health
 * (GPU 0 stays healthy): `reasons` (clock event reason bits, default 0), `sm_clock` (MHz,
 * default 1980), `temp_c` (default 45), `power_mw` (default 300000), `ecc_uncorrected` and
 * `ecc_corrected` (volatile counts, default 0), and `xid` (an XID delivered once to a
 * registered event set each time the file's value changes to a non-zero one).
 * FAKE_NVML_LOG=<file>: one line appended per nvmlInit_v2 ("init") and nvmlShutdown
 * ("shutdown"), so a test can count them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef void *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2 };

#define GPUS 2
#define TOTAL (80ULL << 30)

static int initialised;
static char devices[GPUS];

static void log_call(const char *what)
{
	const char *path = getenv("FAKE_NVML_LOG");
	if (!path)
		return;
	FILE *f = fopen(path, "a");
	if (f) {
		fprintf(f, "%s\n", what);
		fclose(f);
	}
}

/* An integer from `$FAKE_NVML_CTL/name`, `dflt` when absent or unreadable. */
static long ctl(const char *name, long dflt)
{
	const char *dir = getenv("FAKE_NVML_CTL");
	char path[4096];
	long v = dflt;
	if (!dir)
		return dflt;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return dflt;
	if (fscanf(f, "%ld", &v) != 1)
		v = dflt;
	fclose(f);
	return v;
}

static int device_index(nvmlDevice_t d)
{
	for (int i = 0; i < GPUS; i++)
		if (d == &devices[i])
			return i;
	return -1;
}

API int nvmlInit_v2(void)
{
	initialised = 1;
	log_call("init");
	return NVML_SUCCESS;
}

API int nvmlShutdown(void)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	initialised = 0;
	log_call("shutdown");
	return NVML_SUCCESS;
}

API int nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	*count = GPUS;
	return NVML_SUCCESS;
}

API int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (i >= GPUS)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devices[i];
	return NVML_SUCCESS;
}

API int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = TOTAL;
	m->free = TOTAL / 100 * (unsigned long long)ctl("free_pct", 25);
	m->used = m->total - m->free;
	return NVML_SUCCESS;
}

API int nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || len < 16)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(name, len, "Fake GPU 80GB");
	return NVML_SUCCESS;
}

API int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* GPU 1 is the busy one: the agent takes the busiest. */
	u->gpu = device_index(d) == 1 ? (unsigned int)ctl("util_pct", 0) : 0;
	u->memory = 0;
	return NVML_SUCCESS;
}

/* ---- Health: clocks, throttle reasons, temperature, power, ECC, XID ---- */

/* GPU 1 reads the control files; GPU 0 reports the defaults. */
static long health(nvmlDevice_t d, const char *name, long dflt)
{
	return device_index(d) == 1 ? ctl(name, dflt) : dflt;
}

API int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || !r)
		return NVML_ERROR_INVALID_ARGUMENT;
	*r = (unsigned long long)health(d, "reasons", 0);
	return NVML_SUCCESS;
}

API int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || !mhz || type != 1 /* NVML_CLOCK_SM */)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mhz = (unsigned int)health(d, "sm_clock", 1980);
	return NVML_SUCCESS;
}

API int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || !c || sensor != 0 /* NVML_TEMPERATURE_GPU */)
		return NVML_ERROR_INVALID_ARGUMENT;
	*c = (unsigned int)health(d, "temp_c", 45);
	return NVML_SUCCESS;
}

API int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || !mw)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mw = (unsigned int)health(d, "power_mw", 300000);
	return NVML_SUCCESS;
}

API int nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(d) < 0 || !n || (type != 0 && type != 1) || (counter != 0 && counter != 1))
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = (unsigned long long)health(d, type == 1 ? "ecc_uncorrected" : "ecc_corrected", 0);
	return NVML_SUCCESS;
}

typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlEventData_t;

enum { NVML_ERROR_TIMEOUT = 10 };
#define XID_EVENT 0x8ULL

/* One event set (the agent makes one): the GPUs registered for XID events and the last
 * XID value delivered. */
static struct {
	int used;
	int registered[GPUS];
	long last_xid;
} event_set;

API int nvmlEventSetCreate(void **set)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(&event_set, 0, sizeof event_set);
	event_set.used = 1;
	event_set.last_xid = ctl("xid", 0); /* what was there before is not news */
	*set = &event_set;
	return NVML_SUCCESS;
}

API int nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, void *set)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	int i = device_index(d);
	if (i < 0 || set != &event_set || !(types & XID_EVENT))
		return NVML_ERROR_INVALID_ARGUMENT;
	event_set.registered[i] = 1;
	return NVML_SUCCESS;
}

API int nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeout_ms)
{
	(void)timeout_ms; /* the agent polls with 0 */
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (set != &event_set || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	long xid = ctl("xid", 0);
	if (xid == 0 || xid == event_set.last_xid || !event_set.registered[1]) {
		if (xid == 0)
			event_set.last_xid = 0;
		return NVML_ERROR_TIMEOUT;
	}
	event_set.last_xid = xid;
	memset(data, 0, sizeof *data);
	data->device = &devices[1];
	data->eventType = XID_EVENT;
	data->eventData = (unsigned long long)xid;
	return NVML_SUCCESS;
}

API int nvmlEventSetFree(void *set)
{
	if (set != &event_set)
		return NVML_ERROR_INVALID_ARGUMENT;
	event_set.used = 0;
	return NVML_SUCCESS;
}
