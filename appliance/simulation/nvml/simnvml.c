/*
 * Simulated NVML: libnvidia-ml.so.1 for a simulated node, so that pynvml's own code runs unchanged.
 *
 * Compiled against NVIDIA's real nvml.h (the nvidia-nvml-dev wheel) by appliance/simulation/nvml/__init__.py.
 *
 * The node is chosen at nvmlInit from APPLIANCE_SIM_SYSROOT (never at load time: one long-lived
 * interpreter may serve several nodes, one after the other). Every call re-reads the node's
 * <sysroot>/var/lib/appliance-sim/nvml.state when it changed (a line-oriented view the Python state
 * module writes with every change of state.json; format in state.py:_nvml_sidecar).
 *
 * The few calls that change state (persistence mode, MIG mode, MIG instances) run the simulation's
 * Python entry point (`runner.py _nvml-apply ...`) so that state.json stays the single source of
 * truth and its lock is honoured. SIM_PYTHON and SIM_RUNNER are fixed at build time.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvml.h"

#ifndef SIM_PYTHON
#error "SIM_PYTHON (the interpreter that runs the simulation) must be defined"
#endif
#ifndef SIM_RUNNER
#error "SIM_RUNNER (appliance/simulation/tools/runner.py) must be defined"
#endif

#define MAX_GPUS 16
#define MAX_LINKS 18
#define MAX_PROFILES 16
#define MAX_GI_ID 64
#define MAX_CI 8
#define MAX_MIG 8

extern char **environ;

struct sim_profile {
    unsigned nvml_profile, id, compute, memory_slices, max, memory_mib, sms, placement_count;
    unsigned placements[8];
    char name[64];
};
struct sim_ci {
    unsigned id, profile_id, slices;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
};
struct sim_gi {
    unsigned used, id, profile_id, start, size, ci_count;
    struct sim_ci ci[MAX_CI];
};
struct sim_gpu {
    unsigned index;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE], bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned pci_device_id, pci_subsystem_id;
    unsigned long long memory_total, memory_reserved, memory_used;
    unsigned util_gpu, util_memory, power_mw, power_limit_mw, temperature, persistence;
    unsigned mig_capable, mig_current, mig_pending;
    unsigned gen_current, gen_max, width_current, width_max;
    unsigned retired_sbe, retired_dbe, retired_pending, sms, cc_major, cc_minor;
    unsigned link_count, links[MAX_LINKS];
    unsigned profile_count;
    struct sim_profile profiles[MAX_PROFILES];
    struct sim_gi gi[MAX_GI_ID];
};
struct sim_node {
    unsigned driver_loaded, gpu_count;
    int cuda_version;
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    struct sim_gpu gpu[MAX_GPUS];
};

/* Handles point into these static tables, so they stay valid across re-reads of the state. */
struct nvmlDevice_st { int is_mig; unsigned slot, gi, ci; };
struct nvmlGpuInstance_st { unsigned slot, gi; };
struct nvmlComputeInstance_st { unsigned slot, gi, ci; };

static struct nvmlDevice_st device_handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_GI_ID][MAX_CI];
static struct nvmlGpuInstance_st gi_handles[MAX_GPUS][MAX_GI_ID];
static struct nvmlComputeInstance_st ci_handles[MAX_GPUS][MAX_GI_ID][MAX_CI];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static char sysroot[4096];
static char sidecar[4200];
static struct stat sidecar_seen;
static struct sim_node node;

static void copy_text(char *target, size_t size, const char *value)
{
    snprintf(target, size, "%s", value);
}

static struct sim_gpu *gpu_at(unsigned slot)
{
    return slot < node.gpu_count && slot < MAX_GPUS ? &node.gpu[slot] : NULL;
}

static void parse_line(char *line)
{
    char kind[16], key[48];
    unsigned slot = 0, a = 0, b = 0, c = 0, d = 0, e = 0;
    unsigned long long value = 0;
    int used = 0;
    struct sim_gpu *gpu;

    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "text ", 5) == 0) {
        char *rest = line + 5;
        if (sscanf(rest, "system %47s %n", key, &used) == 1 && used) {
            if (strcmp(key, "driver_version") == 0)
                copy_text(node.driver_version, sizeof node.driver_version, rest + used);
            return;
        }
        if (sscanf(rest, "gpu %u %47s %n", &slot, key, &used) == 2 && used && (gpu = &node.gpu[slot % MAX_GPUS])) {
            const char *text = rest + used;
            if (strcmp(key, "name") == 0) copy_text(gpu->name, sizeof gpu->name, text);
            else if (strcmp(key, "uuid") == 0) copy_text(gpu->uuid, sizeof gpu->uuid, text);
            else if (strcmp(key, "serial") == 0) copy_text(gpu->serial, sizeof gpu->serial, text);
            else if (strcmp(key, "pci_bus_id") == 0) copy_text(gpu->bus_id, sizeof gpu->bus_id, text);
            return;
        }
        if (strncmp(rest, "profile ", 8) == 0) {
            struct sim_profile p;
            char placements[64];
            memset(&p, 0, sizeof p);
            if (sscanf(rest, "profile %u %u %u %u %u %u %u %u %63s %n", &slot, &p.nvml_profile, &p.id, &p.compute,
                       &p.memory_slices, &p.max, &p.memory_mib, &p.sms, placements, &used) == 9 && used) {
                gpu = &node.gpu[slot % MAX_GPUS];
                copy_text(p.name, sizeof p.name, rest + used);
                for (char *token = strtok(placements, ","); token && p.placement_count < 8; token = strtok(NULL, ","))
                    p.placements[p.placement_count++] = (unsigned)strtoul(token, NULL, 10);
                if (gpu->profile_count < MAX_PROFILES) gpu->profiles[gpu->profile_count++] = p;
            }
            return;
        }
        if (strncmp(rest, "ci ", 3) == 0) {
            char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
            if (sscanf(rest, "ci %u %u %u %u %u %95s", &slot, &a, &b, &c, &d, uuid) == 6 && a < MAX_GI_ID) {
                struct sim_gi *gi = &node.gpu[slot % MAX_GPUS].gi[a];
                if (gi->ci_count < MAX_CI) {
                    struct sim_ci *ci = &gi->ci[gi->ci_count++];
                    ci->id = b; ci->profile_id = c; ci->slices = d;
                    copy_text(ci->uuid, sizeof ci->uuid, uuid);
                }
            }
        }
        return;
    }
    if (sscanf(line, "%15s", kind) != 1) return;
    if (strcmp(kind, "system") == 0 && sscanf(line, "system %47s %llu", key, &value) == 2) {
        if (strcmp(key, "driver_loaded") == 0) node.driver_loaded = (unsigned)value;
        else if (strcmp(key, "gpu_count") == 0) node.gpu_count = value > MAX_GPUS ? MAX_GPUS : (unsigned)value;
        else if (strcmp(key, "cuda_version") == 0) node.cuda_version = (int)value;
    } else if (strcmp(kind, "gpu") == 0 && sscanf(line, "gpu %u %47s %llu", &slot, key, &value) == 3) {
        gpu = &node.gpu[slot % MAX_GPUS];
        unsigned v = (unsigned)value;
        if (strcmp(key, "index") == 0) gpu->index = v;
        else if (strcmp(key, "pci_device_id") == 0) gpu->pci_device_id = v;
        else if (strcmp(key, "pci_subsystem_id") == 0) gpu->pci_subsystem_id = v;
        else if (strcmp(key, "memory_total") == 0) gpu->memory_total = value;
        else if (strcmp(key, "memory_reserved") == 0) gpu->memory_reserved = value;
        else if (strcmp(key, "memory_used") == 0) gpu->memory_used = value;
        else if (strcmp(key, "util_gpu") == 0) gpu->util_gpu = v;
        else if (strcmp(key, "util_memory") == 0) gpu->util_memory = v;
        else if (strcmp(key, "power_mw") == 0) gpu->power_mw = v;
        else if (strcmp(key, "power_limit_mw") == 0) gpu->power_limit_mw = v;
        else if (strcmp(key, "temperature") == 0) gpu->temperature = v;
        else if (strcmp(key, "persistence") == 0) gpu->persistence = v;
        else if (strcmp(key, "mig_capable") == 0) gpu->mig_capable = v;
        else if (strcmp(key, "mig_current") == 0) gpu->mig_current = v;
        else if (strcmp(key, "mig_pending") == 0) gpu->mig_pending = v;
        else if (strcmp(key, "pcie_gen_current") == 0) gpu->gen_current = v;
        else if (strcmp(key, "pcie_gen_max") == 0) gpu->gen_max = v;
        else if (strcmp(key, "pcie_width_current") == 0) gpu->width_current = v;
        else if (strcmp(key, "pcie_width_max") == 0) gpu->width_max = v;
        else if (strcmp(key, "retired_sbe") == 0) gpu->retired_sbe = v;
        else if (strcmp(key, "retired_dbe") == 0) gpu->retired_dbe = v;
        else if (strcmp(key, "retired_pending") == 0) gpu->retired_pending = v;
        else if (strcmp(key, "multiprocessors") == 0) gpu->sms = v;
        else if (strcmp(key, "cc_major") == 0) gpu->cc_major = v;
        else if (strcmp(key, "cc_minor") == 0) gpu->cc_minor = v;
        else if (strcmp(key, "nvlink_count") == 0) gpu->link_count = v > MAX_LINKS ? MAX_LINKS : v;
    } else if (strcmp(kind, "nvlink") == 0 && sscanf(line, "nvlink %u %u %u", &slot, &a, &b) == 3 && a < MAX_LINKS) {
        node.gpu[slot % MAX_GPUS].links[a] = b;
    } else if (strcmp(kind, "gi") == 0 && sscanf(line, "gi %u %u %u %u %u", &slot, &a, &b, &c, &d) == 5 && a < MAX_GI_ID) {
        struct sim_gi *gi = &node.gpu[slot % MAX_GPUS].gi[a];
        gi->used = 1; gi->id = a; gi->profile_id = b; gi->start = c; gi->size = d;
    }
    (void)e;
}

/* Re-read the node's view if it changed (the Python side replaces the file atomically). */
static nvmlReturn_t refresh(void)
{
    struct stat now;
    FILE *file;
    char line[512];

    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (stat(sidecar, &now) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (now.st_ino == sidecar_seen.st_ino && now.st_size == sidecar_seen.st_size &&
        now.st_mtim.tv_sec == sidecar_seen.st_mtim.tv_sec && now.st_mtim.tv_nsec == sidecar_seen.st_mtim.tv_nsec)
        return node.driver_loaded ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
    file = fopen(sidecar, "r");
    if (!file) return NVML_ERROR_DRIVER_NOT_LOADED;
    memset(&node, 0, sizeof node);
    while (fgets(line, sizeof line, file)) parse_line(line);
    fclose(file);
    sidecar_seen = now;
    return node.driver_loaded ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
}

#define LOCKED(call)                                        \
    do {                                                    \
        nvmlReturn_t result_;                               \
        pthread_mutex_lock(&lock);                          \
        result_ = refresh();                                \
        if (result_ == NVML_SUCCESS) result_ = (call);      \
        pthread_mutex_unlock(&lock);                        \
        return result_;                                     \
    } while (0)

/* Run `runner.py _nvml-apply <sysroot> <operation> <numbers...>`; parse "result <code> [value]". */
static nvmlReturn_t apply(const char *operation, int *value, int count, ...)
{
    char numbers[6][16];
    char *argv[16];
    int pipefd[2], status = 0, argc = 0, code = NVML_ERROR_UNKNOWN, out = -1;
    posix_spawn_file_actions_t actions;
    pid_t pid;
    char buffer[1024];
    size_t length = 0;
    ssize_t got;
    va_list args;

    argv[argc++] = (char *)SIM_PYTHON;
    argv[argc++] = (char *)"-I";
    argv[argc++] = (char *)SIM_RUNNER;
    argv[argc++] = (char *)"_nvml-apply";
    argv[argc++] = sysroot;
    argv[argc++] = (char *)operation;
    va_start(args, count);
    for (int i = 0; i < count && i < 6; i++) {
        snprintf(numbers[i], sizeof numbers[i], "%d", va_arg(args, int));
        argv[argc++] = numbers[i];
    }
    va_end(args);
    argv[argc] = NULL;

    if (pipe(pipefd) != 0) return NVML_ERROR_OPERATING_SYSTEM;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipefd[0]);
    posix_spawn_file_actions_addclose(&actions, pipefd[1]);
    if (posix_spawn(&pid, SIM_PYTHON, &actions, NULL, argv, environ) != 0) {
        posix_spawn_file_actions_destroy(&actions);
        close(pipefd[0]);
        close(pipefd[1]);
        return NVML_ERROR_OPERATING_SYSTEM;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(pipefd[1]);
    while (length < sizeof buffer - 1 && (got = read(pipefd[0], buffer + length, sizeof buffer - 1 - length)) > 0)
        length += (size_t)got;
    buffer[length] = 0;
    close(pipefd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (sscanf(buffer, "result %d %d", &code, &out) >= 1 && value) *value = out;
    /* The state changed under us: force a re-read whatever the timestamps say. */
    memset(&sidecar_seen, 0, sizeof sidecar_seen);
    return (nvmlReturn_t)code;
}

#define IN_TABLE(pointer, table) \
    ((const char *)(pointer) >= (const char *)(table) && (const char *)(pointer) < (const char *)(table) + sizeof(table))

static struct sim_gpu *device_gpu(nvmlDevice_t device)
{
    if (!device || !(IN_TABLE(device, device_handles) || IN_TABLE(device, mig_handles)))
        return NULL;
    return gpu_at(device->slot);
}

static struct sim_gi *gi_of(nvmlGpuInstance_t instance)
{
    struct sim_gpu *gpu;
    if (!instance || !IN_TABLE(instance, gi_handles)) return NULL;
    gpu = gpu_at(instance->slot);
    if (!gpu || instance->gi >= MAX_GI_ID || !gpu->gi[instance->gi].used) return NULL;
    return &gpu->gi[instance->gi];
}

static nvmlReturn_t text_out(char *target, unsigned int length, const char *value)
{
    if (!target) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(target, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ---- init, system -------------------------------------------------------------------------- */

static nvmlReturn_t init(void)
{
    const char *root = getenv("APPLIANCE_SIM_SYSROOT");
    nvmlReturn_t result;

    pthread_mutex_lock(&lock);
    if (!root || !*root) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    /* The node is chosen here, at every init: the same process may act on another node next. */
    copy_text(sysroot, sizeof sysroot, root);
    snprintf(sidecar, sizeof sidecar, "%s/var/lib/appliance-sim/nvml.state", sysroot);
    memset(&sidecar_seen, 0, sizeof sidecar_seen);
    init_count++;
    result = refresh();
    if (result != NVML_SUCCESS) init_count--;
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return init(); }
nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInit(void) { return init(); }

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t result = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0) result = NVML_ERROR_UNINITIALIZED;
    else init_count--;
    pthread_mutex_unlock(&lock);
    return result;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t driver_version(char *version, unsigned int length) { return text_out(version, length, node.driver_version); }
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { LOCKED(driver_version(version, length)); }

static nvmlReturn_t nvml_version(char *version, unsigned int length)
{
    char text[96];
    unsigned major = (unsigned)node.cuda_version / 1000;
    snprintf(text, sizeof text, "%u.%s", major, node.driver_version);
    return text_out(version, length, text);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) { LOCKED(nvml_version(version, length)); }

static nvmlReturn_t cuda_version(int *version)
{
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = node.cuda_version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { LOCKED(cuda_version(version)); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { LOCKED(cuda_version(version)); }

/* ---- devices -------------------------------------------------------------------------------- */

static nvmlReturn_t device_count(unsigned int *count)
{
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = node.gpu_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { LOCKED(device_count(count)); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { LOCKED(device_count(count)); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!device || index >= node.gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    device_handles[index].is_mig = 0;
    device_handles[index].slot = index;
    *device = &device_handles[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) { LOCKED(handle_by_index(index, device)); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) { LOCKED(handle_by_index(index, device)); }

static nvmlReturn_t handle_by_uuid(const char *uuid, nvmlDevice_t *device)
{
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned slot = 0; slot < node.gpu_count; slot++)
        if (strcmp(node.gpu[slot].uuid, uuid) == 0) return handle_by_index(slot, device);
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) { LOCKED(handle_by_uuid(uuid, device)); }

static nvmlReturn_t handle_by_bus_id(const char *bus_id, nvmlDevice_t *device)
{
    if (!bus_id || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned slot = 0; slot < node.gpu_count; slot++)
        if (strcasecmp(node.gpu[slot].bus_id, bus_id) == 0 ||
            strcasecmp(node.gpu[slot].bus_id + 4, bus_id) == 0) return handle_by_index(slot, device);
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) { LOCKED(handle_by_bus_id(bus_id, device)); }

#define GPU_OR_FAIL(device, gpu)                                     \
    struct sim_gpu *gpu = device_gpu(device);                        \
    if (!gpu) return NVML_ERROR_INVALID_ARGUMENT

static struct sim_ci *mig_ci(nvmlDevice_t device)
{
    struct sim_gpu *gpu = device_gpu(device);
    if (!gpu || !device->is_mig || device->gi >= MAX_GI_ID || !gpu->gi[device->gi].used) return NULL;
    for (unsigned i = 0; i < gpu->gi[device->gi].ci_count; i++)
        if (gpu->gi[device->gi].ci[i].id == device->ci) return &gpu->gi[device->gi].ci[i];
    return NULL;
}

static nvmlReturn_t device_index(nvmlDevice_t device, unsigned int *index)
{
    GPU_OR_FAIL(device, gpu);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->slot;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) { LOCKED(device_index(device, index)); }
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) { LOCKED(device_index(device, minor)); }

static nvmlReturn_t device_name(nvmlDevice_t device, char *name, unsigned int length)
{
    GPU_OR_FAIL(device, gpu);
    if (device->is_mig) {
        char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 64];
        const char *profile = "";
        for (unsigned i = 0; i < gpu->profile_count; i++)
            if (gpu->profiles[i].id == gpu->gi[device->gi].profile_id) profile = gpu->profiles[i].name;
        snprintf(text, sizeof text, "%s MIG %s", gpu->name, profile);
        return text_out(name, length, text);
    }
    return text_out(name, length, gpu->name);
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) { LOCKED(device_name(device, name, length)); }

static nvmlReturn_t device_uuid(nvmlDevice_t device, char *uuid, unsigned int length)
{
    GPU_OR_FAIL(device, gpu);
    if (device->is_mig) {
        struct sim_ci *ci = mig_ci(device);
        return ci ? text_out(uuid, length, ci->uuid) : NVML_ERROR_NOT_FOUND;
    }
    return text_out(uuid, length, gpu->uuid);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) { LOCKED(device_uuid(device, uuid, length)); }

static nvmlReturn_t device_serial(nvmlDevice_t device, char *serial, unsigned int length)
{
    GPU_OR_FAIL(device, gpu);
    return text_out(serial, length, gpu->serial);
}
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) { LOCKED(device_serial(device, serial, length)); }

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    unsigned domain = 0, bus = 0, dev = 0;
    GPU_OR_FAIL(device, gpu);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    sscanf(gpu->bus_id, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
    copy_text(pci->busId, sizeof pci->busId, gpu->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, domain, bus, dev);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) { LOCKED(pci_info(device, pci)); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { LOCKED(pci_info(device, pci)); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) { LOCKED(pci_info(device, pci)); }

static void memory_of(nvmlDevice_t device, struct sim_gpu *gpu, unsigned long long *total,
                      unsigned long long *reserved, unsigned long long *used)
{
    *total = gpu->memory_total;
    *reserved = gpu->memory_reserved;
    *used = gpu->memory_used;
    if (device->is_mig) {
        *total = gpu->memory_total / 8 * gpu->gi[device->gi].size;
        *reserved = 0;
        *used = 0;
    }
}

static nvmlReturn_t memory_info(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total, reserved, used;
    GPU_OR_FAIL(device, gpu);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory_of(device, gpu, &total, &reserved, &used);
    memory->total = total;
    memory->used = used + reserved;
    memory->free = total - used - reserved;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) { LOCKED(memory_info(device, memory)); }

static nvmlReturn_t memory_info_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long total, reserved, used;
    GPU_OR_FAIL(device, gpu);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_of(device, gpu, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used - reserved;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) { LOCKED(memory_info_v2(device, memory)); }

static nvmlReturn_t utilization(nvmlDevice_t device, nvmlUtilization_t *rates)
{
    GPU_OR_FAIL(device, gpu);
    if (!rates) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    rates->gpu = gpu->util_gpu;
    rates->memory = gpu->util_memory;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *rates) { LOCKED(utilization(device, rates)); }

static nvmlReturn_t unsigned_field(nvmlDevice_t device, unsigned int *out, size_t offset)
{
    GPU_OR_FAIL(device, gpu);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = *(unsigned *)((char *)gpu + offset);
    return NVML_SUCCESS;
}
#define FIELD(device, out, field) unsigned_field(device, out, offsetof(struct sim_gpu, field))

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) { LOCKED(FIELD(device, power, power_mw)); }
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) { LOCKED(FIELD(device, limit, power_limit_mw)); }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) { LOCKED(FIELD(device, limit, power_limit_mw)); }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) { LOCKED(FIELD(device, width, width_current)); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) { LOCKED(FIELD(device, width, width_max)); }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) { LOCKED(FIELD(device, gen, gen_current)); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) { LOCKED(FIELD(device, gen, gen_max)); }
nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) { LOCKED(FIELD(device, gen, gen_max)); }
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *cores) { LOCKED(FIELD(device, cores, sms)); }

static nvmlReturn_t temperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp)
{
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return FIELD(device, temp, temperature);
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp)
{
    LOCKED(temperature(device, sensor, temp));
}

static nvmlReturn_t compute_capability(nvmlDevice_t device, int *major, int *minor)
{
    GPU_OR_FAIL(device, gpu);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)gpu->cc_major;
    *minor = (int)gpu->cc_minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    LOCKED(compute_capability(device, major, minor));
}

static nvmlReturn_t persistence_get(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    GPU_OR_FAIL(device, gpu);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = gpu->persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) { LOCKED(persistence_get(device, mode)); }

static nvmlReturn_t persistence_set(nvmlDevice_t device, nvmlEnableState_t mode)
{
    GPU_OR_FAIL(device, gpu);
    return apply("persistence", NULL, 2, (int)gpu->index, mode == NVML_FEATURE_ENABLED ? 1 : 0);
}
nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode) { LOCKED(persistence_set(device, mode)); }

static nvmlReturn_t nvlink_state(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *active)
{
    GPU_OR_FAIL(device, gpu);
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= gpu->link_count) return gpu->link_count ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    *active = gpu->links[link] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *active)
{
    LOCKED(nvlink_state(device, link, active));
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *count,
                                  unsigned long long *addresses, unsigned long long *timestamps)
{
    unsigned total;
    GPU_OR_FAIL(device, gpu);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    total = cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ? gpu->retired_sbe : gpu->retired_dbe;
    if (*count < total) {
        *count = total;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < total; i++) {
        if (addresses) addresses[i] = 0x1000ULL * (i + 1);
        if (timestamps) timestamps[i] = 1764460800ULL + i;
    }
    *count = total;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *count,
                                       unsigned long long *addresses)
{
    LOCKED(retired_pages(device, cause, count, addresses, NULL));
}
nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *count,
                                          unsigned long long *addresses, unsigned long long *timestamps)
{
    LOCKED(retired_pages(device, cause, count, addresses, timestamps));
}

static nvmlReturn_t retired_pending(nvmlDevice_t device, nvmlEnableState_t *pending)
{
    GPU_OR_FAIL(device, gpu);
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    *pending = gpu->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *pending)
{
    LOCKED(retired_pending(device, pending));
}

/* ---- MIG ------------------------------------------------------------------------------------ */

static nvmlReturn_t mig_mode_get(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    GPU_OR_FAIL(device, gpu);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *current = gpu->mig_current;
    *pending = gpu->mig_pending;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    LOCKED(mig_mode_get(device, current, pending));
}

static nvmlReturn_t mig_mode_set(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation)
{
    nvmlReturn_t result;
    GPU_OR_FAIL(device, gpu);
    if (!activation || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    result = apply("mig-mode", NULL, 2, (int)gpu->index, (int)mode);
    /* Hopper applies the change at once on an idle GPU: no reset pending. */
    *activation = result;
    return result;
}
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation)
{
    LOCKED(mig_mode_set(device, mode, activation));
}

static nvmlReturn_t is_mig_handle(nvmlDevice_t device, unsigned int *is_mig)
{
    GPU_OR_FAIL(device, gpu);
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = (unsigned)device->is_mig;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) { LOCKED(is_mig_handle(device, is_mig)); }

static struct sim_profile *profile_by(struct sim_gpu *gpu, int nvml_profile, int id)
{
    for (unsigned i = 0; i < gpu->profile_count; i++)
        if ((nvml_profile >= 0 && gpu->profiles[i].nvml_profile == (unsigned)nvml_profile) ||
            (id >= 0 && gpu->profiles[i].id == (unsigned)id))
            return &gpu->profiles[i];
    return NULL;
}

static void fill_profile(struct sim_profile *p, unsigned *id, unsigned *slices, unsigned *count, unsigned *sms,
                         unsigned *copy, unsigned *dec, unsigned *enc, unsigned *jpeg, unsigned *ofa,
                         unsigned long long *memory)
{
    *id = p->id;
    *slices = p->compute;
    *count = p->max;
    *sms = p->sms;
    *copy = p->compute;
    *dec = p->compute;
    *enc = 0;
    *jpeg = p->compute;
    *ofa = p->compute == 7 ? 1 : 0;
    *memory = p->memory_mib;
}

static nvmlReturn_t profile_info(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info)
{
    struct sim_profile *p;
    GPU_OR_FAIL(device, gpu);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, (int)profile, -1))) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->isP2pSupported = 0;
    fill_profile(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                 &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount, &info->ofaCount,
                 &info->memorySizeMB);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    LOCKED(profile_info(device, profile, info));
}

static nvmlReturn_t profile_info_v(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct sim_profile *p;
    unsigned version;
    GPU_OR_FAIL(device, gpu);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, (int)profile, -1))) return NVML_ERROR_NOT_SUPPORTED;
    version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    fill_profile(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                 &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount, &info->ofaCount,
                 &info->memorySizeMB);
    snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED(profile_info_v(device, profile, info));
}

static nvmlReturn_t possible_placements(nvmlDevice_t device, unsigned int profile_id,
                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    struct sim_profile *p;
    GPU_OR_FAIL(device, gpu);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, -1, (int)profile_id))) return NVML_ERROR_INVALID_ARGUMENT;
    if (!placements) {
        *count = p->placement_count;
        return NVML_SUCCESS;
    }
    if (*count < p->placement_count) {
        *count = p->placement_count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < p->placement_count; i++) {
        placements[i].start = p->placements[i];
        placements[i].size = p->memory_slices;
    }
    *count = p->placement_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile_id,
                                                           nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    LOCKED(possible_placements(device, profile_id, placements, count));
}

static nvmlReturn_t remaining_capacity(nvmlDevice_t device, unsigned int profile_id, unsigned int *count)
{
    struct sim_profile *p;
    unsigned free_count = 0, existing = 0;
    GPU_OR_FAIL(device, gpu);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, -1, (int)profile_id))) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < p->placement_count; i++) {
        unsigned start = p->placements[i], end = start + p->memory_slices, overlaps = 0;
        for (unsigned g = 0; g < MAX_GI_ID; g++)
            if (gpu->gi[g].used && !(end <= gpu->gi[g].start || start >= gpu->gi[g].start + gpu->gi[g].size))
                overlaps = 1;
        free_count += !overlaps;
    }
    for (unsigned g = 0; g < MAX_GI_ID; g++) existing += gpu->gi[g].used && gpu->gi[g].profile_id == p->id;
    *count = existing >= p->max ? 0 : (free_count < p->max - existing ? free_count : p->max - existing);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id, unsigned int *count)
{
    LOCKED(remaining_capacity(device, profile_id, count));
}

static nvmlGpuInstance_t gi_handle(unsigned slot, unsigned gi)
{
    gi_handles[slot][gi].slot = slot;
    gi_handles[slot][gi].gi = gi;
    return &gi_handles[slot][gi];
}

static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t *placement,
                              nvmlGpuInstance_t *instance)
{
    int created = -1;
    nvmlReturn_t result;
    GPU_OR_FAIL(device, gpu);
    if (!instance) return NVML_ERROR_INVALID_ARGUMENT;
    result = apply("create-gi", &created, 3, (int)gpu->index, (int)profile_id, placement ? (int)placement->start : -1);
    if (result != NVML_SUCCESS) return result;
    if (created < 0 || created >= MAX_GI_ID) return NVML_ERROR_UNKNOWN;
    *instance = gi_handle(device->slot, (unsigned)created);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *instance)
{
    LOCKED(create_gi(device, profile_id, NULL, instance));
}
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *instance)
{
    if (!placement) return NVML_ERROR_INVALID_ARGUMENT;
    LOCKED(create_gi(device, profile_id, placement, instance));
}

static nvmlReturn_t get_gis(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *instances,
                            unsigned int *count)
{
    unsigned found = 0;
    GPU_OR_FAIL(device, gpu);
    if (!count || !instances) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned g = 0; g < MAX_GI_ID; g++)
        if (gpu->gi[g].used && gpu->gi[g].profile_id == profile_id) instances[found++] = gi_handle(device->slot, g);
    *count = found;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *instances,
                                       unsigned int *count)
{
    LOCKED(get_gis(device, profile_id, instances, count));
}

static nvmlReturn_t gi_by_id(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *instance)
{
    GPU_OR_FAIL(device, gpu);
    if (!instance || id >= MAX_GI_ID) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->gi[id].used) return NVML_ERROR_NOT_FOUND;
    *instance = gi_handle(device->slot, id);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *instance)
{
    LOCKED(gi_by_id(device, id, instance));
}

static nvmlReturn_t gi_info(nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t *info)
{
    struct sim_gi *gi = gi_of(instance);
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    device_handles[instance->slot].slot = instance->slot;
    info->device = &device_handles[instance->slot];
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t *info) { LOCKED(gi_info(instance, info)); }

static nvmlReturn_t destroy_gi(nvmlGpuInstance_t instance)
{
    struct sim_gi *gi = gi_of(instance);
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    return apply("destroy-gi", NULL, 2, (int)node.gpu[instance->slot].index, (int)gi->id);
}
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t instance) { LOCKED(destroy_gi(instance)); }

static struct sim_profile *gi_profile(unsigned slot, struct sim_gi *gi)
{
    return profile_by(&node.gpu[slot], -1, (int)gi->profile_id);
}

static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t instance, unsigned int profile, unsigned int engine,
                                    nvmlComputeInstanceProfileInfo_v2_t *info, int versioned)
{
    static const unsigned slices_of[] = {1, 2, 3, 4, 7};
    struct sim_gi *gi = gi_of(instance);
    struct sim_profile *p;
    unsigned version;
    if (!gi || !info || engine != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) return NVML_ERROR_INVALID_ARGUMENT;
    if (versioned && info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    p = gi_profile(instance->slot, gi);
    if (profile > NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE || !p || slices_of[profile] > p->compute)
        return NVML_ERROR_NOT_SUPPORTED;
    version = info->version;
    if (versioned) {
        memset(info, 0, sizeof *info);
        info->version = version;
        snprintf(info->name, sizeof info->name, "MIG %uc.%s", slices_of[profile], p->name);
    } else {
        memset(info, 0, sizeof(nvmlComputeInstanceProfileInfo_t));
    }
    {
        /* nvmlComputeInstanceProfileInfo_t is the v2 layout without `version` and `name`. */
        unsigned *fields = versioned ? &info->id : (unsigned *)info;
        fields[0] = profile;
        fields[1] = slices_of[profile];
        fields[2] = p->compute / slices_of[profile];
        fields[3] = p->sms * slices_of[profile] / p->compute;
        fields[4] = p->compute;
        fields[5] = p->compute;
        fields[6] = 0;
        fields[7] = p->compute;
        fields[8] = p->compute == 7 ? 1 : 0;
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t instance, unsigned int profile,
                                                          unsigned int engine, nvmlComputeInstanceProfileInfo_t *info)
{
    LOCKED(ci_profile_info(instance, profile, engine, (nvmlComputeInstanceProfileInfo_v2_t *)info, 0));
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t instance, unsigned int profile,
                                                           unsigned int engine,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    LOCKED(ci_profile_info(instance, profile, engine, info, 1));
}

static nvmlComputeInstance_t ci_handle(unsigned slot, unsigned gi, unsigned ci)
{
    ci_handles[slot][gi][ci].slot = slot;
    ci_handles[slot][gi][ci].gi = gi;
    ci_handles[slot][gi][ci].ci = ci;
    return &ci_handles[slot][gi][ci];
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t instance, unsigned int profile_id, nvmlComputeInstance_t *compute)
{
    struct sim_gi *gi = gi_of(instance);
    int created = -1;
    nvmlReturn_t result;
    if (!gi || !compute) return NVML_ERROR_INVALID_ARGUMENT;
    result = apply("create-ci", &created, 3, (int)node.gpu[instance->slot].index, (int)gi->id, (int)profile_id);
    if (result != NVML_SUCCESS) return result;
    if (created < 0 || created >= MAX_CI) return NVML_ERROR_UNKNOWN;
    *compute = ci_handle(instance->slot, gi->id, (unsigned)created);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t instance, unsigned int profile_id,
                                                  nvmlComputeInstance_t *compute)
{
    LOCKED(create_ci(instance, profile_id, compute));
}

static nvmlReturn_t get_cis(nvmlGpuInstance_t instance, unsigned int profile_id, nvmlComputeInstance_t *computes,
                            unsigned int *count)
{
    struct sim_gi *gi = gi_of(instance);
    unsigned found = 0;
    if (!gi || !computes || !count) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < gi->ci_count; i++)
        if (gi->ci[i].profile_id == profile_id) computes[found++] = ci_handle(instance->slot, gi->id, gi->ci[i].id);
    *count = found;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t instance, unsigned int profile_id,
                                                nvmlComputeInstance_t *computes, unsigned int *count)
{
    LOCKED(get_cis(instance, profile_id, computes, count));
}

static nvmlReturn_t destroy_ci(nvmlComputeInstance_t compute)
{
    if (!compute || !IN_TABLE(compute, ci_handles) || compute->slot >= node.gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    return apply("destroy-ci", NULL, 3, (int)node.gpu[compute->slot].index, (int)compute->gi, (int)compute->ci);
}
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t compute) { LOCKED(destroy_ci(compute)); }

static nvmlReturn_t max_mig_count(nvmlDevice_t device, unsigned int *count)
{
    GPU_OR_FAIL(device, gpu);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu->mig_capable ? 7 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) { LOCKED(max_mig_count(device, count)); }

static nvmlReturn_t mig_by_index(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig)
{
    unsigned position = 0;
    GPU_OR_FAIL(device, gpu);
    if (!mig || device->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned g = 0; g < MAX_GI_ID; g++) {
        if (!gpu->gi[g].used) continue;
        for (unsigned c = 0; c < gpu->gi[g].ci_count; c++, position++) {
            if (position == index) {
                struct nvmlDevice_st *handle = &mig_handles[device->slot][g][gpu->gi[g].ci[c].id % MAX_CI];
                handle->is_mig = 1;
                handle->slot = device->slot;
                handle->gi = g;
                handle->ci = gpu->gi[g].ci[c].id;
                *mig = handle;
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig)
{
    LOCKED(mig_by_index(device, index, mig));
}

static nvmlReturn_t parent_of_mig(nvmlDevice_t mig, nvmlDevice_t *device)
{
    GPU_OR_FAIL(mig, gpu);
    if (!device || !mig->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    device_handles[mig->slot].slot = mig->slot;
    *device = &device_handles[mig->slot];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device)
{
    LOCKED(parent_of_mig(mig, device));
}

static nvmlReturn_t mig_ids(nvmlDevice_t mig, unsigned int *id, int compute)
{
    GPU_OR_FAIL(mig, gpu);
    if (!id || !mig->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = compute ? mig->ci : mig->gi;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t mig, unsigned int *id) { LOCKED(mig_ids(mig, id, 0)); }
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t mig, unsigned int *id) { LOCKED(mig_ids(mig, id, 1)); }
