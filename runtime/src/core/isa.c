/* isa.c — which SIMD and matrix extensions the CPU and OS offer, and which
 * the dispatch tables may use (VTPU_ISA caps it). Detected once; portable C
 * stays the fallback on every CPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if VT_X86
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static unsigned isa_avail, isa_start; /* set once */
static _Atomic unsigned isa_act;      /* isa_start, or what a test forced (vt_isa_force) */

#if VT_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static unsigned detect_x86(void) {
    unsigned a, b, c, d, mask = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return 0; /* OS does not save XMM/YMM state */
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return 0;
    unsigned b7, c7, d7, a7;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    int avx2 = (b7 >> 5) & 1;
    if (avx2 && fma) mask |= VT_ISA_AVX2;
    int f = (b7 >> 16) & 1, dq = (b7 >> 17) & 1, bw = (b7 >> 30) & 1, vl = (b7 >> 31) & 1;
    int os_avx512 = (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if ((mask & VT_ISA_AVX2) && f && dq && bw && vl && os_avx512) {
        mask |= VT_ISA_AVX512;
        unsigned a71, b71, c71, d71;
        __cpuid_count(7, 1, a71, b71, c71, d71);
        (void)b71, (void)c71, (void)d71;
        if ((a71 >> 5) & 1) mask |= VT_ISA_AVX512BF16;
        int amx_tile = (d7 >> 24) & 1, amx_bf16 = (d7 >> 22) & 1;
        int os_amx = ((xcr0 >> 17) & 3) == 3; /* XTILECFG, XTILEDATA */
        if (amx_tile && amx_bf16 && os_amx) {
            /* Linux hands out the large tile state only on request. */
            if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0)
                mask |= VT_ISA_AMX;
        }
    }
    (void)a;
    (void)a7;
    return mask;
}
#endif

/* Each level with everything below it; the order is the preference order. */
static const struct {
    const char *name;
    unsigned bit, upto;
} levels[] = {
    {"amx", VT_ISA_AMX, VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16 | VT_ISA_AMX},
    {"avx512bf16", VT_ISA_AVX512BF16, VT_ISA_AVX2 | VT_ISA_AVX512 | VT_ISA_AVX512BF16},
    {"avx512", VT_ISA_AVX512, VT_ISA_AVX2 | VT_ISA_AVX512},
    {"avx2", VT_ISA_AVX2, VT_ISA_AVX2},
    {"neon", VT_ISA_NEON, VT_ISA_NEON},
    {"scalar", 0, 0},
};
#define NLEVELS (sizeof levels / sizeof levels[0])

static const char *path_of(unsigned mask) {
    for (size_t i = 0; i < NLEVELS; i++)
        if (levels[i].bit && (mask & levels[i].bit)) return levels[i].name;
    return "scalar";
}

static unsigned env_cap(unsigned avail) {
    const char *env = getenv("VTPU_ISA");
    if (!env || !*env) return avail;
    for (size_t i = 0; i < NLEVELS; i++) {
        if (strcmp(env, levels[i].name) != 0) continue;
        if (levels[i].bit && !(avail & levels[i].bit)) {
            fprintf(stderr, "vtpu: VTPU_ISA=%s is not available on this CPU; using %s\n", env, path_of(avail));
            return avail;
        }
        return avail & levels[i].upto;
    }
    fprintf(stderr, "vtpu: unknown VTPU_ISA=%s (want amx, avx512bf16, avx512, avx2, neon or scalar); using %s\n",
            env, path_of(avail));
    return avail;
}

static void isa_detect(void) {
#if VT_X86
    isa_avail = detect_x86();
#elif defined(__aarch64__)
    isa_avail = VT_ISA_NEON;
#else
    isa_avail = 0;
#endif
    isa_start = env_cap(isa_avail);
    atomic_store(&isa_act, isa_start);
}

unsigned vt_isa_available(void) {
    pthread_once(&isa_once, isa_detect);
    return isa_avail;
}

unsigned vt_isa_active(void) {
    pthread_once(&isa_once, isa_detect);
    return atomic_load_explicit(&isa_act, memory_order_relaxed);
}

const char *vt_isa_path(void) { return path_of(vt_isa_active()); }

unsigned vt_isa_default(void) {
    pthread_once(&isa_once, isa_detect);
    return isa_start;
}

unsigned vt_isa_set_active(unsigned mask) {
    pthread_once(&isa_once, isa_detect);
    mask &= isa_avail;
    atomic_store(&isa_act, mask);
    return mask;
}
