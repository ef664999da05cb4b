/* Generated code for the fusion groups of graph programs (graph/codegen.c):
 * a program's groups of elementwise nodes, recorded in DeferAndFuse inside
 * vt_defer_program_begin/end, run as one compiled C function per group from
 * their second program run on; the results must be Strict's bit for bit,
 * in f32 and bf16 (the compute dtype's rounding after every op), with host
 * scalars, an alpha (fused multiply-add), a conversion, and a reduction fed
 * by the group. Where the system has no C compiler (VTPU_CC=none), the
 * groups run their plans and the same results are checked. */
#include "graph/codegen.h"
#include "test_defer_util.h"
#include "vtpu/cache.h"

static void codegen_prog(prog *p, vt_dtype dt) {
    int64_t sh[2] = {160, 200}; /* 32000 elements: above VT_CG_MIN_ELEMS */
    const int x = add_buf(p, dt, 2, sh, 0), y = add_buf(p, dt, 2, sh, 0);
    const int t1 = add_buf(p, dt, 2, sh, 1), t2 = add_buf(p, dt, 2, sh, 1), t3 = add_buf(p, dt, 2, sh, 1);
    const int o = add_buf(p, dt, 2, sh, 0), o2 = add_buf(p, dt, 2, sh, 0), c = add_buf(p, VT_F32, 2, sh, 0);
    const int r = add_reduced_buf(p, VT_F32, t3, 2);
    add_step(p, VT_NODE_BINARY, VT_MUL, dt, t1, x, y, 0);   /* t1 = x * y */
    add_step(p, VT_NODE_BINARY, VT_ADD, dt, t2, t1, -1, 0); /* t2 = t1 + 0.75 * 1.5: fma */
    add_step(p, VT_NODE_BINARY, VT_SUB, dt, t3, t2, x, 0);  /* t3 = t2 - 0.75 * x: fma */
    add_step(p, VT_NODE_UNARY, VT_RELU, dt, o, t3, 0, 0);   /* o = relu(t3) */
    add_step(p, VT_NODE_BINARY, VT_DIV, dt, o2, o, y, 0);   /* o2 = o / y */
    add_step(p, VT_NODE_UNARY, VT_NEG, dt, o2, o2, 0, 0);   /* o2 = -o2, in place */
    add_step(p, VT_NODE_COPY, 0, VT_F32, c, o2, 0, 0);      /* c = o2 as f32 */
    add_reduce(p, VT_REDUCE_SUM, VT_F32, r, c, 2, 0.0);     /* r = c.sum(1): a tail */
}

TEST(codegen_program_groups_match_strict) {
    CHECK_OK(vt_init());
    const vt_dtype dts[2] = {VT_F32, VT_BF16};
    const int on = vt_cg_enabled();
    for (int d = 0; d < 2; d++) {
        prog p = {0};
        codegen_prog(&p, dts[d]);
        host_tensor want[MAXBUF], got[MAXBUF];
        CHECK_OK(run_prog(&p, VT_EAGER_STRICT, want));
        vt_codegen_stats before, after;
        vt_codegen_get_stats(&before);
        for (int run = 0; run < 3; run++) { /* looked up in the second run */
            vt_defer_program_begin();
            vt_status s = run_prog(&p, VT_EAGER_DEFER_AND_FUSE, got);
            vt_defer_program_end();
            CHECK_MSG(s == VT_OK, "%s", vt_last_error());
            for (int i = 0; i < p.nbuf && s == VT_OK; i++)
                if (!p.dead[i] && !p.alias[i])
                    CHECK_MSG(ht_compare("generated", &want[i].t, &got[i].t, -1) == 0, "%s run %d buffer %d",
                              vt_dtype_name(dts[d]), run, i);
            free_results(&p, got);
        }
        vt_codegen_get_stats(&after);
        if (on)
            CHECK_MSG(after.runs > before.runs && after.failures == before.failures,
                      "%s: runs %llu -> %llu, failures %llu", vt_dtype_name(dts[d]), (unsigned long long)before.runs,
                      (unsigned long long)after.runs, (unsigned long long)after.failures);
        else
            CHECK(after.runs == before.runs);
        free_results(&p, want);
        prog_free(&p);
    }
}

/* A compiler that cannot build anything: the groups run their plans, the
 * failure is counted once per group, and the results stay Strict's. */
TEST(codegen_failed_compile_runs_the_plans) {
    CHECK_OK(vt_init());
    CHECK(vt_codegen_set_compiler("/nonexistent/cc") == VT_ERR_INVALID_ARGUMENT);
    CHECK(!vt_cg_enabled());
    CHECK_OK(vt_codegen_set_compiler("false")); /* exits 1 */
    prog p = {0};
    codegen_prog(&p, VT_F32);
    host_tensor want[MAXBUF], got[MAXBUF];
    CHECK_OK(run_prog(&p, VT_EAGER_STRICT, want));
    vt_codegen_stats before, after;
    vt_codegen_get_stats(&before);
    for (int run = 0; run < 3; run++) {
        vt_defer_program_begin();
        CHECK_OK(run_prog(&p, VT_EAGER_DEFER_AND_FUSE, got));
        vt_defer_program_end();
        for (int i = 0; i < p.nbuf; i++)
            if (!p.dead[i] && !p.alias[i]) CHECK(ht_compare("plans", &want[i].t, &got[i].t, -1) == 0);
        free_results(&p, got);
    }
    vt_codegen_get_stats(&after);
    CHECK(after.runs == before.runs && after.failures > before.failures && after.compiles == before.compiles);
    const char *env = getenv("VTPU_CC");
    vt_codegen_set_compiler(env && *env ? env : "cc");
    free_results(&p, want);
    prog_free(&p);
}
