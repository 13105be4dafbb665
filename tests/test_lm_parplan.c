/* test_lm_parplan.c - the layout planner's cost model (lm_parplan.h): its terms against values derived here by
 * hand from the header's formulas for a small model, the ranking's sanity (more bandwidth, flops or less latency
 * never predicts a slower step; only legal layouts; fitting layouts first, in order of time), the budgets, and the
 * text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "lm_parplan.h"
#include "lm_pipeline.h"
#include "testlib.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1); }

/* the model's parameter count, summed from its specs */
static double count_params(const col_lm_config *c)
{
    int n = col_lm_param_count(c);
    col_param_spec *s = calloc((size_t)n, sizeof *s);
    double t = 0;
    col_lm_param_specs(c, s);
    for (int i = 0; i < n; i++)
        t += (double)col_param_numel(&s[i]);
    free(s);
    return t;
}

static col_plan_input small_input(int world)
{
    /* GPT-2 shaped: vocabulary 64, 16 positions, width 8, 2 layers, 2 heads (head_dim 4, MLP 32) */
    col_plan_input in = {.model = col_gpt2_config(64, 16, 8, 2, 2), .batch = 4, .seq = 16, .world = world,
                         .precision = COL_F32, .opt_state_bytes = 8,
                         .rates = {.flops = 1e6, .link_bw = 1e3, .link_lat = 1e-3}};
    return in;
}

static col_plan_entry predict(const col_plan_input *in, col_plan_layout l, col_status *st)
{
    col_plan_entry e;
    col_err err = {0};
    *st = col_plan_predict(in, &l, &e, &err);
    if (*st != COL_OK)
        TL_NOTE("predict: %s", err.msg);
    return e;
}

static void test_formulas(void)
{
    col_plan_input in = small_input(1);
    const double h = 8, s = 16, f = 32, L = 2, V = 64, B = 4, e = 4;
    col_status st;
    /* compute, one process: W_layer = h (h + 2 h) + h h + 2 f h = 8*24 + 64 + 512 = 768 (q, k, v, output, two MLP
     * matrices), the head V h = 512; flops = (L (6 W_layer + 12 h s) + 6 V h) B s */
    col_plan_entry x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1}, &st);
    double w_layer = h * (h + 2 * h) + h * h + 2 * f * h;
    double flops = (L * (6 * w_layer + 12 * h * s) + 6 * V * h) * B * s;
    TL_OK(st == COL_OK && near(x.flops, flops) && near(x.t_compute, flops / 1e6),
          "compute: %.0f flops (hand: %.0f), %.4f s at 1 Mflop/s", x.flops, flops, x.t_compute);
    TL_OK(x.b_dp == 0 && x.b_tp == 0 && x.b_sp == 0 && x.b_pp == 0 && x.t_step == x.t_compute,
          "one process: no communication, the step is its compute (mem_bw 0: no memory term)");
    /* memory: f32, AdamW: params 4 psi, gradients 4 psi, states 8 psi */
    double psi = count_params(&in.model);
    TL_OK(near(x.params, 4 * psi) && near(x.grads, 4 * psi) && near(x.states, 8 * psi),
          "one process: parameters, gradients, states = 4, 4, 8 bytes x %.0f", psi);

    /* data parallel, 2 processes: ring reduce-scatter + all-gather: 2 (P-1)/P of 4 psi bytes, 2 (P-1) messages per
     * chunk, L + 1 chunks; ZeRO 1/2/3 memory: 4+4+8/2, 4+4/2+8/2, (4+4+8)/2 bytes per parameter */
    in = small_input(2);
    double zmem[3];
    for (int z = 1; z <= 3; z++) {
        x = predict(&in, (col_plan_layout){.dp = 2, .pp = 1, .micro_batches = 1, .zero = z}, &st);
        zmem[z - 1] = x.params + x.grads + x.states;
    }
    double bdp = 2.0 * (2 - 1) / 2 * 4 * psi, mdp = 2.0 * (2 - 1) * (L + 1);
    TL_OK(st == COL_OK && near(x.b_dp, bdp) && near(x.m_dp, mdp) && near(x.t_dp, bdp / 1e3 + mdp * 1e-3),
          "dp 2: %.0f bytes (hand %.0f), %.0f messages, %.4f s", x.b_dp, bdp, x.m_dp, x.t_dp);
    TL_OK(near(zmem[0], 12 * psi) && near(zmem[1], 10 * psi) && near(zmem[2], 8 * psi) && zmem[2] < zmem[0],
          "ZeRO 1, 2, 3 hold 12, 10, 8 bytes per parameter (%.0f, %.0f, %.0f)", zmem[0] / psi, zmem[1] / psi,
          zmem[2] / psi);
    x = predict(&in, (col_plan_layout){.dp = 2, .pp = 1, .micro_batches = 1, .zero = 1}, &st);
    TL_OK(near(x.t_compute, flops / 2 / 1e6), "dp 2: half the compute per process");

    /* tensor parallel; U = b s h e with b = B (one group, one micro-batch) */
    double U = B * s * h * e;
    in = small_input(2);
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1, .par = {.mode = COL_TP_1D, .tp = 2}}, &st);
    /* 1D: 4 all-reduces per layer of 2 (t-1)/t U, and one for the embedding */
    double b1 = L * 4 * 2.0 * (2 - 1) / 2 * U + 2.0 * (2 - 1) / 2 * U;
    TL_OK(st == COL_OK && near(x.b_tp, b1) && near(x.m_tp, L * 8 * (2 - 1) + 2 * (2 - 1)),
          "1D tp 2: %.0f bytes (hand %.0f), %.0f messages", x.b_tp, b1, x.m_tp);
    TL_OK(near(x.params, 4 * psi / 2), "1D tp 2: half the parameters per process");
    in = small_input(4);
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1, .par = {.mode = COL_TP_2D, .tp = 4}}, &st);
    double q = 2, d = 2;
    TL_OK(st == COL_OK && x.l.par.q == 2 && near(x.b_tp, L * 6 * (q - 1) / q * U),
          "2D tp 4 (q 2): 6 (q-1)/q U per layer = %.0f bytes (got %.0f)", L * 6 * (q - 1) / q * U, x.b_tp);
    in = small_input(8);
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1,
                                       .par = {.mode = COL_TP_25D, .tp = 8, .d = 2}}, &st);
    TL_OK(st == COL_OK && x.l.par.q == 2 && near(x.b_tp, L * 3 * (q - 1) * (d + 1) / (d * q) * U),
          "2.5D tp 8 (q 2, d 2): 3 (q-1)(d+1)/(dq) U per layer = %.0f bytes (got %.0f)",
          L * 3 * (q - 1) * (d + 1) / (d * q) * U, x.b_tp);
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1, .par = {.mode = COL_TP_3D, .tp = 8}}, &st);
    TL_OK(st == COL_OK && x.l.par.q == 2 && near(x.b_tp, L * 6 * (q - 1) / (q * q * q) * U),
          "3D tp 8 (q 2): 6 (q-1)/q^3 U per layer = %.0f bytes (got %.0f)", L * 6 * (q - 1) / (q * q * q) * U, x.b_tp);

    /* sequence parallel, 2 processes: the local block is b (s/2) rows of the key/value width 8 */
    in = small_input(2);
    double loc = B * (s / 2) * e;
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1,
                                       .par = {.sp = 2, .sp_mode = COL_SP_RING}}, &st);
    /* ring: 2 (P-1) passes of a K and a V block per layer */
    TL_OK(st == COL_OK && near(x.b_sp, L * 2 * (2 - 1) * 2 * loc * h) && near(x.m_sp, L * 2 * (2 - 1) * 2),
          "ring sp 2: 2 (P-1) K/V block passes per layer = %.0f bytes (got %.0f)", L * 2 * (2 - 1) * 2 * loc * h,
          x.b_sp);
    /* the weights are shared by the sequence's processes: their gradients are all-reduced, 2 (P-1)/P of 4 psi */
    TL_OK(near(x.b_dp, 2.0 * (2 - 1) / 2 * 4 * psi), "sp 2: the gradients all-reduced over the sequence's processes");
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 1, .micro_batches = 1,
                                       .par = {.sp = 2, .sp_mode = COL_SP_ULYSSES}}, &st);
    /* Ulysses: 4 all-to-alls forward and 4 backward of q, k, v and the output, (P-1)/P of each leaving */
    TL_OK(st == COL_OK && near(x.b_sp, L * 2 * (2 - 1) / 2.0 * loc * (2 * h + 2 * h)) &&
              near(x.m_sp, L * 8 * (2 - 1)),
          "Ulysses sp 2: %.0f bytes (hand %.0f), %.0f messages", x.b_sp, L * 2 * 0.5 * loc * 4 * h, x.m_sp);

    /* pipeline, 2 stages, 2 micro-batches of 2 rows: one hidden state per micro-batch across the boundary
     * (2 s h e bytes), the bubble (P-1)/M of the stage's work; recomputation: 8 and 16 instead of 6 and 12 */
    in = small_input(2);
    x = predict(&in, (col_plan_layout){.dp = 1, .pp = 2, .micro_batches = 2}, &st);
    double hb = 2 * s * h * e, sflops = (1 * (8 * w_layer + 16 * h * s) + 8 * V * h) * B * s;
    TL_OK(st == COL_OK && near(x.b_pp, 2 * hb) && near(x.flops, sflops) &&
              near(x.t_bubble, (x.t_compute + x.t_pp) * (2 - 1) / 2),
          "pp 2, M 2: %.0f bytes sent (hand %.0f), stage flops %.0f (hand %.0f), bubble %.4f s", x.b_pp, 2 * hb,
          x.flops, sflops, x.t_bubble);
}

static void test_legality(void)
{
    col_plan_input in = small_input(4);
    col_status st;
    col_err err = {0};
    col_plan_entry x;
    col_plan_layout bad[] = {
        {.dp = 2, .pp = 1, .micro_batches = 1, .zero = 1},                                  /* 2 of 4 processes */
        {.dp = 1, .pp = 4, .micro_batches = 2},                                             /* 4 stages, 2 layers */
        {.dp = 1, .pp = 1, .micro_batches = 1, .par = {.mode = COL_TP_2D, .tp = 4, .sp = 1}, .zero = 0},
        {.dp = 1, .pp = 1, .micro_batches = 1, .par = {.sp = 4, .sp_mode = COL_SP_ULYSSES}}, /* 2 heads, 4 parts */
        {.dp = 4, .pp = 1, .micro_batches = 2, .zero = 1},                                   /* mb without a pipeline */
    };
    bad[2].dp = 2; /* 2 x 4 = 8 */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = col_plan_predict(&in, &bad[i], &x, &err);
        TL_OK(st != COL_OK && err.msg[0], "illegal layout %zu refused: %s", i, err.msg);
        err = (col_err){0};
    }
    /* the small model with 257 ids: no 1D layout splits the vocabulary */
    in.model = col_gpt2_config(257, 128, 64, 2, 4);
    in.batch = 12, in.seq = 32;
    in.rates.link_bw = 1e9, in.rates.link_lat = 1e-5, in.rates.flops = 1e10;
    col_plan_entry *e = NULL;
    int n = 0;
    st = col_plan_rank(&in, &e, &n, &err);
    TL_OK(st == COL_OK && n > 0, "gpt2-tiny over 4 processes: %d layouts", n);
    bool legal = true, seen1d = false;
    for (int i = 0; i < n; i++) {
        col_plan_layout l = e[i].l;
        col_par_layout par = l.par;
        col_err e2 = {0};
        if ((int64_t)l.dp * l.pp * l.par.tp * l.par.sp != 4 || in.batch % l.dp ||
            (in.batch / l.dp) % l.micro_batches ||
            col_par_layout_check(&par, &in.model, in.seq, in.batch / l.dp / l.micro_batches, &e2) != COL_OK ||
            (l.pp > 1 && col_pp_check(in.model.n_layer, l.pp, 1, l.micro_batches, &e2) != COL_OK))
            legal = false;
        if (l.par.tp > 1 && l.par.mode == COL_TP_1D)
            seen1d = true;
    }
    TL_OK(legal, "every ranked layout multiplies to 4, splits the rows and passes col_par_layout_check and "
          "col_pp_check");
    TL_OK(seen1d, "1D tensor parallel layouts are offered for a vocabulary of 257 (padded to the parts, as the 1D mode "
          "does)");
    free(e);
    in.exclude = COL_PLAN_NO_TP | COL_PLAN_NO_SP | COL_PLAN_NO_PP;
    st = col_plan_rank(&in, &e, &n, &err);
    bool only_dp = st == COL_OK && n == 3;
    for (int i = 0; only_dp && i < n; i++)
        only_dp = e[i].l.dp == 4 && e[i].l.par.tp == 1 && e[i].l.par.sp == 1 && e[i].l.pp == 1;
    TL_OK(only_dp, "excluding tp, sp and pp leaves dp 4 with ZeRO 1, 2, 3 (%d layouts)", n);
    free(e);
    in.world = 0;
    st = col_plan_rank(&in, &e, &n, &err);
    TL_OK(st == COL_EINVAL && n == 0, "0 processes refused: %s", err.msg);
}

/* every layout of the two rankings predicted no slower with the better rates */
static void test_monotonic(void)
{
    col_plan_input in = small_input(8);
    in.model = col_gpt2_config(64, 64, 32, 4, 4);
    in.batch = 16, in.seq = 64;
    in.rates = (col_plan_rates){.flops = 1e9, .link_bw = 1e8, .link_lat = 1e-5, .mem_bw = 1e9};
    col_err err = {0};
    col_plan_entry *base = NULL;
    int nb = 0;
    col_status st = col_plan_rank(&in, &base, &nb, &err);
    TL_OK(st == COL_OK && nb > 20, "8 processes: %d layouts", nb);
    const char *what[] = {"link bandwidth x4", "flops x4", "latency / 4", "memory bandwidth x4"};
    for (int k = 0; k < 4; k++) {
        col_plan_input b = in;
        if (k == 0) b.rates.link_bw *= 4;
        if (k == 1) b.rates.flops *= 4;
        if (k == 2) b.rates.link_lat /= 4;
        if (k == 3) b.rates.mem_bw *= 4;
        int worse = 0, faster = 0;
        for (int i = 0; i < nb; i++) {
            col_plan_entry y;
            if (col_plan_predict(&b, &base[i].l, &y, &err) != COL_OK) {
                worse++;
                continue;
            }
            worse += y.t_step > base[i].t_step * (1 + 1e-12);
            faster += y.t_step < base[i].t_step;
        }
        TL_OK(worse == 0 && faster > 0, "%s: no layout slower, %d of %d faster", what[k], faster, nb);
    }
    bool sorted = true;
    for (int i = 1; i < nb; i++)
        if (base[i].fits == base[i - 1].fits && base[i].fits && base[i].t_step < base[i - 1].t_step)
            sorted = false;
    TL_OK(sorted, "the ranking is in order of predicted step time");
    free(base);
}

static void test_budgets(void)
{
    col_plan_input in = small_input(4);
    in.model = col_gpt2_config(64, 64, 32, 4, 4);
    in.batch = 16, in.seq = 64;
    double psi = count_params(&in.model);
    /* host budget between ZeRO 3's 16 psi / 4 and ZeRO 2's 4 psi + 12 psi / 4 bytes (dp 4) */
    in.host_bytes = (size_t)(6 * psi);
    col_err err = {0};
    col_plan_entry *e = NULL;
    int n = 0;
    col_status st = col_plan_rank(&in, &e, &n, &err);
    bool order = st == COL_OK && n > 0, seen_no = false, within = true, dp4z3 = false, dp4z2_out = false;
    for (int i = 0; order && i < n; i++) {
        if (!e[i].fits)
            seen_no = true;
        else if (seen_no)
            order = false;
        if (e[i].fits && e[i].params + e[i].grads + e[i].states > (double)in.host_bytes)
            within = false;
        if (e[i].l.dp == 4 && e[i].l.zero == 3 && e[i].fits)
            dp4z3 = true;
        if (e[i].l.dp == 4 && e[i].l.zero == 2 && !e[i].fits && strstr(e[i].why_not, "host"))
            dp4z2_out = true;
    }
    TL_OK(order && within, "host budget 6 bytes/parameter: those that fit first, each within the budget");
    TL_OK(dp4z3 && dp4z2_out, "dp 4: ZeRO 3 fits, ZeRO 2 does not (host)");
    free(e);
    /* too small for anything; then the NVMe tier takes the states */
    in.host_bytes = 1024;
    st = col_plan_rank(&in, &e, &n, &err);
    TL_OK(st == COL_OK && n > 0 && !e[0].fits, "1 KiB of host: no layout fits (%s)", n ? e[0].why_not : "");
    free(e);
    in.nvme = true;
    in.host_bytes = (size_t)(2 * psi);
    in.exclude = COL_PLAN_NO_PP;
    st = col_plan_rank(&in, &e, &n, &err);
    TL_OK(st == COL_OK && n > 0 && e[0].fits && e[0].nvme > 0 && e[0].t_nvme > 0,
          "with an NVMe tier the states overflow there: %.0f bytes, %.3g s a step", n ? e[0].nvme : 0,
          n ? e[0].t_nvme : 0);
    free(e);
    /* a compute tier too small for one micro-batch's activations */
    in = small_input(1);
    in.device_bytes = 1000;
    col_plan_entry x;
    col_plan_layout l = {.dp = 1, .pp = 1, .micro_batches = 1};
    st = col_plan_predict(&in, &l, &x, &err);
    TL_OK(st == COL_OK && !x.fits && strstr(x.why_not, "compute tier"), "a 1000-byte compute tier: %s", x.why_not);
    in.device_bytes = 1 << 30;
    st = col_plan_predict(&in, &l, &x, &err);
    TL_OK(st == COL_OK && x.fits && x.device >= x.activations, "a 1 GiB compute tier holds them");
}

static void test_text(void)
{
    col_plan_input in = small_input(4);
    in.rates.mem_bw = 1e9;
    col_err err = {0};
    col_plan_entry *e = NULL;
    int n = 0;
    col_plan_rank(&in, &e, &n, &err);
    char buf[8192], name[128], why[512];
    size_t w = col_plan_format(&in, e, n, 5, buf, sizeof buf);
    int lines = 0;
    for (size_t i = 0; i < w; i++)
        lines += buf[i] == '\n';
    col_plan_layout_name(&e[0].l, name, sizeof name);
    TL_OK(w == strlen(buf) && lines == 1 + (n < 5 ? n : 5) && strstr(buf, name), "ranking: %d lines, best '%s'",
          lines, name);
    size_t w2 = col_plan_format(&in, e, n, 5, buf, 300);
    TL_OK(w2 < 300 && w2 > 0 && buf[w2 - 1] == '\n', "a short buffer ends at a line (%zu bytes)", w2);
    col_plan_explain(&in, &e[0], why, sizeof why);
    TL_OK(strstr(why, "dominates") != NULL, "explanation: %s", why);
    free(e);
}

int main(void)
{
    test_formulas();
    test_legality();
    test_monotonic();
    test_budgets();
    test_text();
    return tl_done();
}
