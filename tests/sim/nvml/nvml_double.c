/*
 * libnvidia-ml.so.1 test double for the simulated GPU node.
 *
 * Copyright: (c) 2026, gpuops maintainers
 * GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * Answers the NVML calls that nvidia-ml-py makes from a state directory
 * ($GPUSIM_STATE, default /var/lib/gpusim) that tests/sim/gpusim/nvml.py writes:
 *
 *   gpus              one line per GPU: index minor uuid bus_id total_mib reserved_mib name...
 *   config            key=value lines: driver_version, nvml_version, cuda_driver_version,
 *                     release_lag_ms, init_error (NVML return code), no_v2 (0/1)
 *   alloc/G-PID-START one allocation of GPU G by PID whose /proc/PID/stat starttime is START;
 *                     the file holds the MiB
 *   gone/G-PID-START  realtime ms at which a reader first saw that holder gone
 *   ghost/G           "pid mib": memory held by a process that no longer exists
 *   lost/G            present while GPU G is lost
 *
 * The state is read again on every call, so a test can change it under a running client.
 * PIDs are those of the node's outermost PID namespace, as the driver reports host PIDs:
 * an allocation made in a nested namespace (a container) is recorded under its outer PID
 * (gpusim/nvml.py reads it from NSpid). An allocation counts while its process is alive in
 * that namespace's /proc ($GPUSIM_HOST_PROC inside a container, else /proc), is not a
 * zombie and has the recorded start time; once seen gone it still counts for release_lag_ms.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MIB 1048576ULL
#define MAX_GPUS 64
#define MAX_PROCS 256
#define NVML_MEMORY_V2 0x02000028u
#define NOT_AVAILABLE_UINT 0xFFFFFFFFu

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* v2 and v3 share this layout */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t; /* v2 and v3 */

struct sim_gpu {
    unsigned int index, minor;
    unsigned long long total_mib, reserved_mib;
    char uuid[96], bus_id[32], name[96];
};
typedef struct sim_gpu *nvmlDevice_t;

struct sim_proc {
    unsigned int pid;
    unsigned long long mib;
};

static struct sim_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static int init_refs;

static const char *state_dir(void)
{
    const char *dir = getenv("GPUSIM_STATE");
    return dir && *dir ? dir : "/var/lib/gpusim";
}

static int state_path(char *buf, size_t size, const char *fmt, const char *name)
{
    int n = snprintf(buf, size, fmt, state_dir(), name);
    return n > 0 && (size_t)n < size;
}

/* Value of KEY in the config file, or DEFAULT_VALUE. */
static const char *config_get(const char *key, const char *default_value, char *out, size_t size)
{
    char path[4096], line[512];
    size_t key_len = strlen(key);
    FILE *f;

    snprintf(out, size, "%s", default_value);
    if (!state_path(path, sizeof path, "%s/%s", "config") || !(f = fopen(path, "r")))
        return out;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, key_len) == 0 && line[key_len] == '=') {
            line[strcspn(line, "\r\n")] = '\0';
            snprintf(out, size, "%s", line + key_len + 1);
            break;
        }
    }
    fclose(f);
    return out;
}

static long config_long(const char *key, long default_value)
{
    char buf[64], dflt[32];
    snprintf(dflt, sizeof dflt, "%ld", default_value);
    return strtol(config_get(key, dflt, buf, sizeof buf), NULL, 10);
}

static int load_gpus(void)
{
    char path[4096], line[512];
    FILE *f;

    gpu_count = 0;
    if (!state_path(path, sizeof path, "%s/%s", "gpus") || !(f = fopen(path, "r")))
        return 0;
    while (gpu_count < MAX_GPUS && fgets(line, sizeof line, f)) {
        struct sim_gpu *g = &gpus[gpu_count];
        int name_at = 0;
        line[strcspn(line, "\r\n")] = '\0';
        if (sscanf(line, "%u %u %95s %31s %llu %llu %n", &g->index, &g->minor, g->uuid,
                   g->bus_id, &g->total_mib, &g->reserved_mib, &name_at) < 6 || !name_at)
            continue;
        snprintf(g->name, sizeof g->name, "%s", line + name_at);
        g->index = gpu_count++;
    }
    fclose(f);
    return gpu_count > 0;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The /proc of the node's outermost PID namespace, where NVML's PIDs are numbered. */
static const char *host_proc(void)
{
    const char *root = getenv("GPUSIM_HOST_PROC");
    return root && *root ? root : "/proc";
}

/* 1 when PID runs in the node's outermost /proc, is no zombie and started at START. */
static int holder_alive(unsigned int pid, unsigned long long start)
{
    char path[4200], buf[1024], *p;
    unsigned long long field = 0;
    char state;
    ssize_t n;
    int fd, i;

    snprintf(path, sizeof path, "%s/%u/stat", host_proc(), pid);
    if ((fd = open(path, O_RDONLY)) < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (!(p = strrchr(buf, ')')))
        return 0;
    p += 2;
    state = *p;
    if (state == 'Z' || state == 'X')
        return 0;
    /* field 3 is the state; the start time is field 22 */
    for (i = 3; i < 22 && p; i++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p || sscanf(p, "%llu", &field) != 1)
        return 0;
    return field == start;
}

/* While the release lag runs, a holder seen gone still counts. */
static int lag_counts(const char *name, long lag_ms)
{
    char path[4096], tmp[4200], buf[32];
    long long seen;
    FILE *f;

    if (lag_ms <= 0 || !state_path(path, sizeof path, "%s/gone/%s", name))
        return 0;
    if ((f = fopen(path, "r"))) {
        seen = fgets(buf, sizeof buf, f) ? atoll(buf) : 0;
        fclose(f);
        return now_ms() - seen < lag_ms;
    }
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    if (!(f = fopen(tmp, "w")))
        return 0;
    fprintf(f, "%lld\n", now_ms());
    fclose(f);
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return 0;
    }
    return 1;
}

static void forget_gone(const char *name)
{
    char path[4096];
    if (state_path(path, sizeof path, "%s/gone/%s", name))
        unlink(path);
}

static unsigned long long read_mib(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = '\0';
    fclose(f);
    return strtoull(buf, NULL, 10);
}

/* Processes that hold memory on GPU G, as the caller sees them. Returns the count. */
static unsigned int collect(unsigned int g, struct sim_proc *out, unsigned int max)
{
    char path[4096], file[4400], name[16];
    unsigned int n = 0, gpu, pid;
    unsigned long long start;
    long lag = config_long("release_lag_ms", 0);
    struct dirent *e;
    FILE *f;
    DIR *d;

    if (state_path(path, sizeof path, "%s/%s", "alloc") && (d = opendir(path))) {
        while ((e = readdir(d)) && n < max) {
            if (sscanf(e->d_name, "%u-%u-%llu", &gpu, &pid, &start) != 3 || gpu != g)
                continue;
            if (holder_alive(pid, start))
                forget_gone(e->d_name);
            else if (!lag_counts(e->d_name, lag))
                continue;
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            out[n].pid = pid;
            out[n].mib = read_mib(file);
            n++;
        }
        closedir(d);
    }
    snprintf(name, sizeof name, "%u", g);
    if (n < max && state_path(path, sizeof path, "%s/ghost/%s", name) && (f = fopen(path, "r"))) {
        if (fscanf(f, "%u %llu", &out[n].pid, &out[n].mib) == 2 && out[n].mib > 0)
            n++;
        fclose(f);
    }
    return n;
}

static unsigned long long used_mib(unsigned int g)
{
    struct sim_proc procs[MAX_PROCS];
    unsigned long long sum = 0;
    unsigned int i, n = collect(g, procs, MAX_PROCS);
    for (i = 0; i < n; i++)
        sum += procs[i].mib;
    return sum;
}

static int gpu_lost(unsigned int g)
{
    char path[4096], name[16];
    snprintf(name, sizeof name, "%u", g);
    return state_path(path, sizeof path, "%s/lost/%s", name) && access(path, F_OK) == 0;
}

/* Common checks for every call that takes a device handle. */
static nvmlReturn_t check_device(nvmlDevice_t dev)
{
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (dev < gpus || dev >= gpus + gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu_lost(dev->index))
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ---- initialisation ---- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    long code = config_long("init_error", 0);
    (void)flags;
    if (code)
        return (nvmlReturn_t)code;
    if (!init_refs && !load_gpus())
        return NVML_ERROR_DRIVER_NOT_LOADED;
    init_refs++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    init_refs--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system ---- */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    char buf[80];
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, config_get("driver_version", "570.133.20", buf, sizeof buf));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char buf[80];
    return copy_string(version, length, config_get("nvml_version", "12.570.133.20", buf, sizeof buf));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = (int)config_long("cuda_driver_version", 12080);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    char path[4200], buf[256] = "";
    FILE *f;
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!name || !length)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(path, sizeof path, "%s/%u/comm", host_proc(), pid);
    if (!(f = fopen(path, "r")))
        return NVML_ERROR_NOT_FOUND;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

/* ---- device lookup ---- */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

/* A lost GPU cannot even be opened, as nvidia-smi's "Unable to determine the device handle" shows. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu_lost(index))
        return NVML_ERROR_GPU_IS_LOST;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    unsigned int i;
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < gpu_count; i++)
        if (strcmp(gpus[i].uuid, uuid) == 0)
            return nvmlDeviceGetHandleByIndex_v2(i, device);
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    unsigned int i;
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < gpu_count; i++)
        if (strcasecmp(gpus[i].bus_id, bus_id) == 0)
            return nvmlDeviceGetHandleByIndex_v2(i, device);
    return NVML_ERROR_NOT_FOUND;
}

/* ---- device queries ---- */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    nvmlReturn_t rc = check_device(dev);
    return rc ? rc : copy_string(name, length, dev->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    nvmlReturn_t rc = check_device(dev);
    return rc ? rc : copy_string(uuid, length, dev->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = dev->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int *minor)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = dev->minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    sscanf(dev->bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = 0x233510DE; /* H200 SXM device 0x2335, vendor 0x10DE */
    pci->pciSubSystemId = 0x18BE10DE;
    snprintf(pci->busId, sizeof pci->busId, "%s", dev->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xFFFF, bus,
             device, function);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(dev, pci);
}

/* v1: "used" includes the memory the driver and firmware reserve. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *memory)
{
    unsigned long long used;
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    used = used_mib(dev->index) + dev->reserved_mib;
    if (used > dev->total_mib)
        used = dev->total_mib;
    memory->total = dev->total_mib * MIB;
    memory->used = used * MIB;
    memory->free = (dev->total_mib - used) * MIB;
    return NVML_SUCCESS;
}

/*
 * v2: "reserved" apart, "used" is what processes hold. With no_v2 set the call answers as a
 * driver that predates it: pynvml maps FUNCTION_NOT_FOUND to the same NVMLError_FunctionNotFound
 * it raises when the symbol is missing.
 */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory)
{
    unsigned long long used;
    nvmlReturn_t rc;
    if (config_long("no_v2", 0))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if ((rc = check_device(dev)))
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    used = used_mib(dev->index);
    if (used + dev->reserved_mib > dev->total_mib)
        used = dev->total_mib - dev->reserved_mib;
    memory->total = dev->total_mib * MIB;
    memory->reserved = dev->reserved_mib * MIB;
    memory->used = used * MIB;
    memory->free = (dev->total_mib - dev->reserved_mib - used) * MIB;
    return NVML_SUCCESS;
}

/*
 * The two-step protocol: with too small a buffer (or none) the call answers
 * INSUFFICIENT_SIZE and the count needed, or SUCCESS and 0 when nothing runs.
 */
static nvmlReturn_t list_processes(nvmlDevice_t dev, unsigned int *count, void *infos, int v1, int graphics)
{
    struct sim_proc procs[MAX_PROCS];
    unsigned int i, n;
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = graphics ? 0 : collect(dev->index, procs, MAX_PROCS);
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *info = (nvmlProcessInfo_v1_t *)infos + i;
            info->pid = procs[i].pid;
            info->usedGpuMemory = procs[i].mib * MIB;
        } else {
            nvmlProcessInfo_t *info = (nvmlProcessInfo_t *)infos + i;
            info->pid = procs[i].pid;
            info->usedGpuMemory = procs[i].mib * MIB;
            info->gpuInstanceId = NOT_AVAILABLE_UINT;
            info->computeInstanceId = NOT_AVAILABLE_UINT;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return list_processes(d, c, p, 0, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return list_processes(d, c, p, 0, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *p)
{
    return list_processes(d, c, p, 1, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return list_processes(d, c, p, 0, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return list_processes(d, c, p, 0, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *p)
{
    return list_processes(d, c, p, 1, 1);
}
