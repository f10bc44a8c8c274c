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
 * Load counters (clocks, activity, throughput, energy: see "load" below) are written by the workload model
 * (appliance/simulation/workload.py) as values at one instant plus their rates: the cumulative counters are
 * extrapolated to the moment of each call, so two reads a second apart differ as on a real GPU, whatever
 * the driver's write rhythm. GPM samples (nvmlGpmSampleGet) are those counters at one instant, and
 * nvmlGpmMetricsGet derives SM, tensor and DRAM activity and PCIe/NVLink throughput from two of them,
 * as the real library does from two hardware samples.
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
#include <time.h>
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
    unsigned nvml_profile, id, compute, memory_slices, max, memory_mib, sms, media, placement_count;
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
/* Cumulative load counters of a GPU: microseconds of activity (graphics, SM, occupancy, tensor, DRAM),
 * bytes moved (PCIe, NVLink) and energy (mJ). Their rates per second: the activity in ppm (us per s),
 * bytes per second, the power in mW (mJ per s). */
enum { C_GRAPHICS, C_SM, C_OCCUPANCY, C_TENSOR, C_DRAM, C_PCIE_TX, C_PCIE_RX, C_NVLINK_TX, C_NVLINK_RX, C_ENERGY,
       COUNTERS };
static const char *const counter_names[COUNTERS] = {
    "graphics_active_us", "sm_active_us", "sm_occupancy_us", "tensor_active_us", "dram_active_us",
    "pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "energy_mj"};
static const char *const rate_names[COUNTERS] = {
    "graphics_ppm", "sm_ppm", "sm_occupancy_ppm", "tensor_ppm", "dram_ppm",
    "pcie_tx_rate", "pcie_rx_rate", "nvlink_tx_rate", "nvlink_rx_rate", NULL};

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
    unsigned clock_sm, clock_mem, clock_graphics, clock_sm_max, clock_mem_max, clock_graphics_max;
    unsigned long long event_reasons, counter[COUNTERS];
    double rate[COUNTERS];
    unsigned long long ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] */
    unsigned remapped_correctable, remapped_uncorrectable, remapped_pending, remapped_failure;
    unsigned profile_count;
    struct sim_profile profiles[MAX_PROFILES];
    struct sim_gi gi[MAX_GI_ID];
};
struct sim_node {
    unsigned long long counters_ns; /* CLOCK_REALTIME of the counters' values; 0: never loaded, nothing counts */
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
            if (sscanf(rest, "profile %u %u %u %u %u %u %u %u %u %63s %n", &slot, &p.nvml_profile, &p.id, &p.compute,
                       &p.memory_slices, &p.max, &p.memory_mib, &p.sms, &p.media, placements, &used) == 10 && used) {
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
        else if (strcmp(key, "counters_ns") == 0) node.counters_ns = value;
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
        else if (strcmp(key, "clock_sm") == 0) gpu->clock_sm = v;
        else if (strcmp(key, "clock_mem") == 0) gpu->clock_mem = v;
        else if (strcmp(key, "clock_graphics") == 0) gpu->clock_graphics = v;
        else if (strcmp(key, "clock_sm_max") == 0) gpu->clock_sm_max = v;
        else if (strcmp(key, "clock_mem_max") == 0) gpu->clock_mem_max = v;
        else if (strcmp(key, "clock_graphics_max") == 0) gpu->clock_graphics_max = v;
        else if (strcmp(key, "event_reasons") == 0) gpu->event_reasons = value;
        else if (strcmp(key, "ecc_corrected_volatile") == 0) gpu->ecc[0][0] = value;
        else if (strcmp(key, "ecc_uncorrected_volatile") == 0) gpu->ecc[1][0] = value;
        else if (strcmp(key, "ecc_corrected_aggregate") == 0) gpu->ecc[0][1] = value;
        else if (strcmp(key, "ecc_uncorrected_aggregate") == 0) gpu->ecc[1][1] = value;
        else if (strcmp(key, "remapped_correctable") == 0) gpu->remapped_correctable = v;
        else if (strcmp(key, "remapped_uncorrectable") == 0) gpu->remapped_uncorrectable = v;
        else if (strcmp(key, "remapped_pending") == 0) gpu->remapped_pending = v;
        else if (strcmp(key, "remapped_failure") == 0) gpu->remapped_failure = v;
        else {
            for (int i = 0; i < COUNTERS; i++) {
                if (strcmp(key, counter_names[i]) == 0) gpu->counter[i] = value;
                else if (rate_names[i] && strcmp(key, rate_names[i]) == 0) gpu->rate[i] = (double)value;
            }
        }
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
    for (unsigned slot = 0; slot < MAX_GPUS; slot++) node.gpu[slot].rate[C_ENERGY] = node.gpu[slot].power_mw;
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
    if (!gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (mode == NVML_DEVICE_MIG_DISABLE)
        for (unsigned g = 0; g < MAX_GI_ID; g++)
            if (gpu->gi[g].used) return NVML_ERROR_IN_USE; /* destroy the GPU instances first */
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
    /* Hopper's engines (MIG user guide, H100 profiles; gpu_ops.engines says the same for nvidia-smi): one
     * copy engine, decoder and JPEG engine per compute slice, 8 copy engines on the whole GPU; the media
     * extensions take every decoder and JPEG engine and the optical-flow accelerator. */
    *id = p->id;
    *slices = p->compute;
    *count = p->max;
    *sms = p->sms;
    *copy = p->compute == 7 ? 8 : p->compute;
    *dec = p->media ? 7 : p->compute;
    *enc = 0;
    *jpeg = p->media ? 7 : p->compute;
    *ofa = (p->media || p->compute == 7) ? 1 : 0;
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

static nvmlReturn_t profile_info_by_id(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct sim_profile *p;
    GPU_OR_FAIL(device, gpu);
    if (!gpu->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, -1, (int)profile_id))) return NVML_ERROR_NOT_SUPPORTED;
    return profile_info_v(device, p->nvml_profile, info);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profile_id,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED(profile_info_by_id(device, profile_id, info));
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
    for (unsigned g = 0; g < MAX_GI_ID; g++) {
        struct sim_profile *other = gpu->gi[g].used ? profile_by(gpu, -1, (int)gpu->gi[g].profile_id) : NULL;
        existing += gpu->gi[g].used && gpu->gi[g].profile_id == p->id;
        if (p->media && other && other->media) existing = p->max; /* one +me instance per GPU */
    }
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

/* What real NVML refuses before a GPU instance is made (gpu_ops.create_gpu_instance applies the same
 * rules to the state): MIG mode off, an unknown profile, a start the profile does not allow, more than the
 * profile's maximum, a second instance with the media extensions, memory slices already taken. */
static nvmlReturn_t gi_refusal(struct sim_gpu *gpu, unsigned int profile_id, const nvmlGpuInstancePlacement_t *placement)
{
    struct sim_profile *p, *other;
    unsigned existing = 0, allowed = 0;
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!(p = profile_by(gpu, -1, (int)profile_id))) return NVML_ERROR_INVALID_ARGUMENT;
    if (placement) {
        for (unsigned i = 0; i < p->placement_count; i++) allowed |= p->placements[i] == placement->start;
        if (!allowed || (placement->size && placement->size != p->memory_slices)) return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned g = 0; g < MAX_GI_ID; g++) {
        struct sim_gi *gi = &gpu->gi[g];
        if (!gi->used) continue;
        existing += gi->profile_id == p->id;
        other = profile_by(gpu, -1, (int)gi->profile_id);
        if (p->media && other && other->media) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        if (placement && !(placement->start + p->memory_slices <= gi->start || placement->start >= gi->start + gi->size))
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (existing >= p->max) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t *placement,
                              nvmlGpuInstance_t *instance)
{
    int created = -1;
    nvmlReturn_t result;
    GPU_OR_FAIL(device, gpu);
    if (!instance) return NVML_ERROR_INVALID_ARGUMENT;
    result = gi_refusal(gpu, profile_id, placement);
    if (result != NVML_SUCCESS) return result;
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
    if (gi->ci_count) return NVML_ERROR_IN_USE; /* its compute instances go first */
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

static nvmlReturn_t ci_info(nvmlComputeInstance_t compute, nvmlComputeInstanceInfo_t *info)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    unsigned start = 0;
    if (!compute || !info || !IN_TABLE(compute, ci_handles) || !(gpu = gpu_at(compute->slot))) return NVML_ERROR_INVALID_ARGUMENT;
    if (compute->gi >= MAX_GI_ID || !(gi = &gpu->gi[compute->gi])->used) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < gi->ci_count; i++) {
        /* Compute slices are handed out in creation order: a compute instance starts after those before it. */
        if (gi->ci[i].id != compute->ci) {
            start += gi->ci[i].slices;
            continue;
        }
        device_handles[compute->slot].slot = compute->slot;
        info->device = &device_handles[compute->slot];
        info->gpuInstance = gi_handle(compute->slot, compute->gi);
        info->id = gi->ci[i].id;
        info->profileId = gi->ci[i].profile_id;
        info->placement.start = start;
        info->placement.size = gi->ci[i].slices;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t compute, nvmlComputeInstanceInfo_t *info)
{
    LOCKED(ci_info(compute, info));
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t compute, nvmlComputeInstanceInfo_t *info)
{
    LOCKED(ci_info(compute, info));
}

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


/* ---- load: clocks, clock event reasons, energy, throughput, ECC, field values ------------------- */

static unsigned long long now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (unsigned long long)now.tv_sec * 1000000000ULL + (unsigned long long)now.tv_nsec;
}

/* A cumulative counter at `at` (ns): its value when the state was written plus its rate since then. */
static unsigned long long counter_at(const struct sim_gpu *gpu, int which, unsigned long long at)
{
    /* Counters stand still until the workload model first wrote them (they stay monotonic either way). */
    double seconds = node.counters_ns && at > node.counters_ns ? (double)(at - node.counters_ns) / 1e9 : 0.0;
    return gpu->counter[which] + (unsigned long long)(gpu->rate[which] * seconds);
}

static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, int maximum, unsigned int *clock)
{
    GPU_OR_FAIL(device, gpu);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_VIDEO: *clock = maximum ? gpu->clock_graphics_max : gpu->clock_graphics; break;
    case NVML_CLOCK_SM: *clock = maximum ? gpu->clock_sm_max : gpu->clock_sm; break;
    case NVML_CLOCK_MEM: *clock = maximum ? gpu->clock_mem_max : gpu->clock_mem; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return *clock ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    LOCKED(clock_of(device, type, 0, clock));
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    LOCKED(clock_of(device, type, 1, clock));
}
nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id, unsigned int *clock)
{
    if (id > NVML_CLOCK_ID_CUSTOMER_BOOST_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    LOCKED(clock_of(device, type, id != NVML_CLOCK_ID_CURRENT, clock));
}

static nvmlReturn_t event_reasons(nvmlDevice_t device, unsigned long long *reasons, int supported)
{
    GPU_OR_FAIL(device, gpu);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = supported ? (unsigned long long)nvmlClocksEventReasonAll : gpu->event_reasons;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    LOCKED(event_reasons(device, reasons, 0));
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    LOCKED(event_reasons(device, reasons, 0));
}
nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    LOCKED(event_reasons(device, reasons, 1));
}
nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    LOCKED(event_reasons(device, reasons, 1));
}

static nvmlReturn_t total_energy(nvmlDevice_t device, unsigned long long *energy)
{
    GPU_OR_FAIL(device, gpu);
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *energy = counter_at(gpu, C_ENERGY, now_ns());
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    LOCKED(total_energy(device, energy));
}

static nvmlReturn_t pcie_throughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    GPU_OR_FAIL(device, gpu);
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    if (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES) return NVML_ERROR_INVALID_ARGUMENT;
    /* KB/s over the last 20 ms, as the real call reports it. */
    *value = (unsigned)(gpu->rate[counter == NVML_PCIE_UTIL_TX_BYTES ? C_PCIE_TX : C_PCIE_RX] / 1024.0);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    LOCKED(pcie_throughput(device, counter, value));
}

static nvmlReturn_t ecc_mode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    GPU_OR_FAIL(device, gpu);
    (void)gpu;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = NVML_FEATURE_ENABLED; /* HBM3 GPUs always run with ECC */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    LOCKED(ecc_mode(device, current, pending));
}

static nvmlReturn_t ecc_errors(nvmlDevice_t device, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                               unsigned long long *count)
{
    GPU_OR_FAIL(device, gpu);
    if (!count || type > NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter > NVML_AGGREGATE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu->ecc[type][counter];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                                         unsigned long long *count)
{
    LOCKED(ecc_errors(device, type, counter, count));
}

static nvmlReturn_t remapped_rows(nvmlDevice_t device, unsigned int *correctable, unsigned int *uncorrectable,
                                  unsigned int *pending, unsigned int *failure)
{
    GPU_OR_FAIL(device, gpu);
    if (!correctable || !uncorrectable || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    *correctable = gpu->remapped_correctable;
    *uncorrectable = gpu->remapped_uncorrectable;
    *pending = gpu->remapped_pending;
    *failure = gpu->remapped_failure;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *correctable, unsigned int *uncorrectable,
                                       unsigned int *pending, unsigned int *failure)
{
    LOCKED(remapped_rows(device, correctable, uncorrectable, pending, failure));
}

static nvmlReturn_t field_values(nvmlDevice_t device, int count, nvmlFieldValue_t *values)
{
    unsigned long long at = now_ns();
    GPU_OR_FAIL(device, gpu);
    if (count < 0 || (count && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *field = &values[i];
        field->timestamp = (long long)(at / 1000);
        field->latencyUsec = 0;
        field->nvmlReturn = NVML_SUCCESS;
        field->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        switch (field->fieldId) {
        case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: field->value.ullVal = counter_at(gpu, C_ENERGY, at); break;
        /* Summed over the links (scopeId UINT_MAX in the real API; per link the sum / links up). */
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: field->value.ullVal = counter_at(gpu, C_NVLINK_TX, at) / 1024; break;
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: field->value.ullVal = counter_at(gpu, C_NVLINK_RX, at) / 1024; break;
        case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: field->value.ullVal = counter_at(gpu, C_PCIE_TX, at); break;
        case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: field->value.ullVal = counter_at(gpu, C_PCIE_RX, at); break;
        case NVML_FI_DEV_POWER_INSTANT:
            field->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            field->value.uiVal = gpu->power_mw;
            break;
        default: field->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values)
{
    LOCKED(field_values(device, count, values));
}

/* ---- GPM: GPU performance monitoring (Hopper and later) ------------------------------------------ */

#define GPM_MAGIC 0x47504d53u
struct nvmlGpmSample_st {
    unsigned magic, slot, valid;
    unsigned long long at_ns, counter[COUNTERS];
};

static nvmlReturn_t gpm_support(nvmlDevice_t device, nvmlGpmSupport_t *support)
{
    GPU_OR_FAIL(device, gpu);
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = gpu->cc_major >= 9;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support)
{
    LOCKED(gpm_support(device, support));
}

static nvmlReturn_t gpm_streaming(nvmlDevice_t device, unsigned int *state)
{
    GPU_OR_FAIL(device, gpu);
    if (!state) return NVML_ERROR_INVALID_ARGUMENT;
    *state = gpu->cc_major >= 9;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmQueryIfStreamingEnabled(nvmlDevice_t device, unsigned int *state) { LOCKED(gpm_streaming(device, state)); }

static nvmlReturn_t gpm_set_streaming(nvmlDevice_t device, unsigned int state)
{
    GPU_OR_FAIL(device, gpu);
    if (gpu->cc_major < 9) return NVML_ERROR_NOT_SUPPORTED;
    return state ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED; /* the simulated GPU always streams */
}
nvmlReturn_t nvmlGpmSetStreamingEnabled(nvmlDevice_t device, unsigned int state) { LOCKED(gpm_set_streaming(device, state)); }

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    if (!*sample) return NVML_ERROR_MEMORY;
    (*sample)->magic = GPM_MAGIC;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    if (!sample || sample->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0;
    free(sample);
    return NVML_SUCCESS;
}

/* A MIG instance's sample is its GPU's: the simulated load is kept per GPU, not per instance. */
static nvmlReturn_t gpm_sample(nvmlDevice_t device, nvmlGpmSample_t sample)
{
    GPU_OR_FAIL(device, gpu);
    if (!sample || sample->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu->cc_major < 9) return NVML_ERROR_NOT_SUPPORTED;
    sample->slot = device->slot;
    sample->at_ns = now_ns();
    for (int i = 0; i < COUNTERS; i++) sample->counter[i] = counter_at(gpu, i, sample->at_ns);
    sample->valid = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) { LOCKED(gpm_sample(device, sample)); }

static nvmlReturn_t gpm_mig_sample(nvmlDevice_t device, unsigned int gpu_instance, nvmlGpmSample_t sample)
{
    GPU_OR_FAIL(device, gpu);
    if (!gpu->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (gpu_instance >= MAX_GI_ID || !gpu->gi[gpu_instance].used) return NVML_ERROR_NOT_FOUND;
    return gpm_sample(device, sample);
}
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance, nvmlGpmSample_t sample)
{
    LOCKED(gpm_mig_sample(device, gpu_instance, sample));
}

struct gpm_metric { unsigned id; int counter; double scale; const char *short_name, *long_name, *unit; };
/* Activity counters are microseconds per second (x 1e-4 = percent); byte counters give MiB/s. */
static const struct gpm_metric gpm_metrics[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, C_GRAPHICS, 1e-4, "gr_util", "graphics/compute activity", "%"},
    {NVML_GPM_METRIC_SM_UTIL, C_SM, 1e-4, "sm_util", "SM activity", "%"},
    {NVML_GPM_METRIC_SM_OCCUPANCY, C_OCCUPANCY, 1e-4, "sm_occupancy", "SM occupancy", "%"},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, C_TENSOR, 1e-4, "any_tensor_util", "tensor pipe activity", "%"},
    {NVML_GPM_METRIC_HMMA_TENSOR_UTIL, C_TENSOR, 1e-4, "hmma_tensor_util", "HMMA tensor pipe activity", "%"},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, C_DRAM, 1e-4, "dram_bw_util", "DRAM bandwidth utilization", "%"},
    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, C_PCIE_TX, 1.0 / 1048576.0, "pcie_tx", "PCIe transmit", "MiB/sec"},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, C_PCIE_RX, 1.0 / 1048576.0, "pcie_rx", "PCIe receive", "MiB/sec"},
    {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, C_NVLINK_TX, 1.0 / 1048576.0, "nvlink_tx", "NVLink transmit", "MiB/sec"},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, C_NVLINK_RX, 1.0 / 1048576.0, "nvlink_rx", "NVLink receive", "MiB/sec"},
};

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request)
{
    const struct nvmlGpmSample_st *first, *second;
    double seconds;

    if (!request) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    first = request->sample1;
    second = request->sample2;
    if (!first || !second || first->magic != GPM_MAGIC || second->magic != GPM_MAGIC || !first->valid ||
        !second->valid || first->slot != second->slot || request->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Either order, as the real call takes them; the same instant twice has no rate. */
    if (first->at_ns > second->at_ns) {
        const struct nvmlGpmSample_st *swap = first;
        first = second;
        second = swap;
    }
    seconds = (double)(second->at_ns - first->at_ns) / 1e9;
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        const struct gpm_metric *known = NULL;
        for (size_t k = 0; k < sizeof gpm_metrics / sizeof gpm_metrics[0]; k++)
            if (gpm_metrics[k].id == metric->metricId) known = &gpm_metrics[k];
        metric->value = 0;
        metric->metricInfo.shortName = metric->metricInfo.longName = metric->metricInfo.unit = NULL;
        if (!known) {
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        metric->metricInfo.shortName = (char *)known->short_name;
        metric->metricInfo.longName = (char *)known->long_name;
        metric->metricInfo.unit = (char *)known->unit;
        if (seconds <= 0) {
            metric->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            continue;
        }
        metric->value = (double)(second->counter[known->counter] - first->counter[known->counter]) / seconds * known->scale;
        metric->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}
