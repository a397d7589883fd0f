/* A stand-in for libnvidia-ml.so.1 exporting the NVML calls the agent makes, with the
 * real signatures: two GPUs named "Fake GPU 80GB" with 80 GiB each.
 *
 * FAKE_NVML_CTL=<dir>: read on every call, `free_pct` (free memory in percent of total,
 * default 25) and `util_pct` (kernel utilization in percent, default 0).
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
