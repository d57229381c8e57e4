"""A small mutation tester aimed at grad's definitions (``nox -s mutants``).

It copies the committed tree (``git archive HEAD``) into a temporary directory, and for each
mutant changes one thing in that copy (an operator, a comparison, a constant's last bit, the
order of a sum, an argument order, a kernel barrier...), runs the tests that guard the mutated
module there (PYTHONPATH at the copy's ``src`` dirs, a private GTENSOR_CACHE_DIR), and counts
the mutant killed when they fail. The working tree is never written to.

    python tools/mutants.py                       # every mutant
    python tools/mutants.py --sample 200 --seed 1 # a seeded sample
    python tools/mutants.py --only gopt --list    # list the mutants of matching files

The score is killed / (mutants - known equivalent ones); survivors are listed with their
location and change. EQUIVALENT below names mutants reviewed as unobservable.
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GT, TP, OP, DM = "packages/gtensor", "packages/gtape", "packages/gopt", "packages/gdemos"


@dataclass(frozen=True)
class Run:
    """One pytest invocation: test paths, the backend, extra environment."""

    tests: tuple[str, ...]
    backend: str = "numpy"
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Target:
    """A source file, the functions in it to mutate (``*``: every lambda), and its test runs."""

    path: str
    functions: tuple[str, ...]
    runs: tuple[Run, ...]
    constants: bool = False  # also mutate module-level UPPERCASE constant assignments


PIN_VJP = f"{TP}/tests/test_pin_vjp.py"
VJP_RUN = Run((PIN_VJP, f"{TP}/tests/test_pin_broadcast.py"))
SIM_PARITY = Run((f"{GT}/tests/test_parity.py", f"{GT}/tests/test_oracles.py"), "sim",
                 (("GTENSOR_SIM_SCHEDULE", "reverse"),))
RUNTIME_RUN = Run((f"{GT}/tests/test_schedule.py", f"{GT}/tests/test_runtime.py"))
GOPT_RUN = Run((f"{OP}/tests/test_gopt_exact.py", f"{OP}/tests/test_pin_same_shape.py",
                f"{OP}/tests/test_gopt_errors.py", f"{OP}/tests/test_gopt_state.py"))
DEMO_RUN = Run((f"{DM}/tests/test_verdicts.py", f"{DM}/tests/test_gdemos_cli.py"))

RNG_RUN = Run((f"{TP}/tests/test_rng_host.py", f"{TP}/tests/test_rng_tape.py",
               f"{GT}/tests/test_random.py"))

TARGETS = [
    Target(f"{GT}/src/gtensor/ops/elementwise.py", ("*", "_div_vjp"),
           (Run((f"{GT}/tests/test_pin_scalar.py",)), VJP_RUN)),
    Target(f"{GT}/src/gtensor/scalar/transcendental.py",
           ("exp_f64", "log_f64", "expm1_f64", "tanh_f64", "sigmoid_f64", "_pow2", "_scale",
            "_scale_dd", "_fast_two_sum", "_two_sum", "_split", "_two_prod", "_exp_dd"),
           (Run((f"{GT}/tests/test_pin_scalar.py",)),), constants=True),
    Target(f"{GT}/src/gtensor/scalar/dsl.py", ("widened_f32",),
           (Run((f"{GT}/tests/test_pin_scalar.py",)),)),
    Target(f"{GT}/src/gtensor/ops/reduce.py",
           ("*", "serial_sum", "_sum_reference", "_mean_reference", "_sum_vjp", "_mean_vjp",
            "sum_to_axes", "_sum_to_reference", "_reduced_axes", "_keepdims_shape"),
           (Run((f"{GT}/tests/test_pin_reduce.py", f"{GT}/tests/test_oracles.py")), VJP_RUN)),
    Target(f"{GT}/src/gtensor/ops/inner.py", ("serial_matmul",),
           (Run((f"{GT}/tests/test_oracles.py", f"{GT}/tests/test_pin_reduce.py")), VJP_RUN)),
    Target(f"{GT}/src/gtensor/ops/linalg.py", ("_matmul_vjp", "_bmm_vjp"),
           (Run((f"{GT}/tests/test_oracles.py", f"{GT}/tests/test_pin_reduce.py")), VJP_RUN)),
    Target(f"{GT}/src/gtensor/ops/softmax.py",
           ("*", "_softmax_reference", "_softmax_grad_reference"),
           (Run((f"{GT}/tests/test_oracles.py", f"{GT}/tests/test_pin_scalar.py")), VJP_RUN,
            SIM_PARITY)),
    Target(f"{GT}/src/gtensor/ops/movement.py",
           ("_transpose_vjp", "_concat_vjp", "_broadcast_to_vjp", "_slice_reference",
            "_pad_reference", "*"),
           (Run((f"{GT}/tests/test_pin_movement.py",)), VJP_RUN, SIM_PARITY)),
    Target(f"{TP}/src/gtape/backward.py", ("run", "_reached", "reached", "*"),
           (VJP_RUN, Run((f"{TP}/tests/test_tape_bitwise.py", f"{TP}/tests/test_pin_engine.py",
                          f"{TP}/tests/test_tape_requires_grad.py")))),
    Target(f"{OP}/src/gopt/adam.py", ("adam_lr_t", "_begin_step", "_update", "*"), (GOPT_RUN,)),
    Target(f"{OP}/src/gopt/sgd.py", ("_update", "*"), (GOPT_RUN,)),
    Target(f"{OP}/src/gopt/gradients.py", ("global_norm", "clip_scale", "scaled", "with_l2"),
           (GOPT_RUN,)),
    Target(f"{OP}/src/gopt/base.py", ("step", "advance", "device_step", "set_clip"),
           (GOPT_RUN,)),
    Target(f"{OP}/src/gopt/workspace.py", ("__call__", "scalar", "put"), (GOPT_RUN,)),
    # the replays run on kernel backends only: their tests run on cpu
    Target(f"{OP}/src/gopt/base.py", ("_replays", "_replayed_step", "_update_on",
                                      "_device_update"),
           (Run((f"{OP}/tests/test_replayed_step.py", f"{OP}/tests/test_pin_same_shape.py"),
                "cpu"),)),
    Target(f"{TP}/src/gtape/passes.py", ("graph_key", "run"),
           (Run((f"{TP}/tests/test_backward_replay.py", f"{TP}/tests/test_tape_bitwise.py"),
                "cpu"),)),
    # issue 23's ops: the gathers and their scatter-adds, the stable log-probabilities, where
    Target(f"{GT}/src/gtensor/ops/index.py",
           ("check_ids", "_norm", "_take_grad_ref", "_along_ref", "_along_grad_ref",
            "_argmax_ref", "_weight_ref", "_take_vjp", "_take_grad_vjp", "_along_vjp", "*"),
           (Run((f"{GT}/tests/test_oracles.py",)), VJP_RUN, SIM_PARITY)),
    Target(f"{GT}/src/gtensor/ops/logsoftmax.py",
           ("_row_max", "_log_softmax_ref", "_log_softmax_grad_ref", "_logsumexp_ref",
            "_logsumexp_vjp", "_log_softmax_grad_vjp"),
           (Run((f"{GT}/tests/test_oracles.py",)), VJP_RUN, SIM_PARITY)),
    Target(f"{GT}/src/gtensor/ops/select.py", ("_where_vjp", "*"),
           (Run((f"{GT}/tests/test_oracles.py",)), VJP_RUN, SIM_PARITY)),
    # issue 21's norms (composites with a defined order) and the CNN rung's verdict
    Target(f"{TP}/src/gtape/norms.py", ("layer_norm_with", "rms_norm_with", "_check"),
           (Run((f"{TP}/tests/test_norms.py",)),)),
    Target(f"{TP}/src/gtape/nn_init.py", ("as_key", "kaiming_bound", "uniform_init",
                                          "normal_init"),
           (Run((f"{TP}/tests/test_nn_layers.py",)),)),
    Target(f"{DM}/src/gdemos/rung_cnn.py", ("accurate", "bits_equal", "passed"),
           (Run((f"{DM}/tests/test_cnn_rung.py",)),)),
    Target(f"{TP}/src/gtape/losses.py", ("cross_entropy", "bce_with_logits"),
           (Run((f"{TP}/tests/test_stable_losses.py", f"{TP}/tests/test_tape_nn.py")),)),
    # issue 21's random numbers: Philox (the numpy definition), the transforms, dropout
    Target(f"{GT}/src/gtensor/philox.py", ("mulhilo", "block", "counters", "words",
                                           "key_words"),
           (Run((f"{TP}/tests/test_rng_host.py", f"{GT}/tests/test_random.py")),),
           constants=True),
    Target(f"{GT}/src/gtensor/ops/random.py",
           ("rng_uniform_f64", "rng_uniform_f32", "rng_normal_f64", "rng_normal_f32",
            "check_shape", "check_p", "check_fold_index", "fold_words", "split_words",
            "threshold", "scale", "_bits_ref", "_uniform_ref", "_normal_ref", "_fold_ref",
            "_dropout_ref", "_dropout_vjp", "_dropout_launch", "_draw_launch", "_fold_launch"),
           (RNG_RUN, VJP_RUN, Run((f"{GT}/tests/test_random.py",), "sim")), constants=True),
    Target(f"{TP}/src/gtape/rng.py", ("key", "check_key", "dropout", "_draw", "_dtype", "fold"),
           (RNG_RUN,)),
    # issue 21's conv2d and pools: the numpy definitions, the shape rules and the rules
    Target(f"{GT}/src/gtensor/ops/conv.py",
           ("pair", "out_size", "groups_of", "im2col", "_grouped_cols", "_conv_ref",
            "_grad_weight_ref", "col2im", "_grad_input_ref", "_conv_vjp", "_grad_input_vjp",
            "_grad_weight_vjp"),
           (Run((f"{GT}/tests/test_conv.py",)), VJP_RUN)),
    Target(f"{GT}/src/gtensor/ops/pool.py",
           ("window_attrs", "pooled_size", "window_rows", "taps", "scatter", "window_choice",
            "_pick", "_max_vjp", "_max_grad_vjp", "_pick_vjp"),
           (Run((f"{GT}/tests/test_conv.py",)), VJP_RUN)),
    Target(f"{GT}/src/gtensor/ops/avg_pool.py",
           ("divisors", "adaptive_bounds", "_adaptive_size", "_avg_ref", "_avg_grad_ref",
            "_adaptive_ref", "_adaptive_grad_ref", "_avg_vjp", "_avg_grad_vjp", "_adaptive_vjp",
            "_adaptive_grad_vjp"),
           (Run((f"{GT}/tests/test_conv.py",)), VJP_RUN)),
    Target(f"{DM}/src/gdemos/rung_ae.py", ("check_bars", "bar_word", "missed", "unchecked"),
           (DEMO_RUN,)),
    Target(f"{DM}/src/gdemos/ladder.py", ("status", "line", "run_ladder", "_ae"), (DEMO_RUN,)),
    Target(f"{DM}/src/gdemos/cli.py", ("ladder_exit",), (DEMO_RUN,)),
]

# Hand-written text mutants of the CUDA source and the simulator: (file, old, new, what);
# each replaces the first occurrence of ``old``.
KERNEL_RUNS = (Run((f"{GT}/tests/test_schedule.py",)), SIM_PARITY)
SIM_H = f"{GT}/src/gtensor/runtime/sim_runtime.h"
COMMON_H = f"{GT}/src/gtensor/runtime/common_runtime.h"  # sim's (and cpu's) intrinsics, FpEnv
TEXT_MUTANTS = [
    (f"{GT}/src/gtensor/ops/softmax.py",
     "yr[r * B] = $EXP($SUB(xr[r * B], mx));\n        __syncthreads();",
     "yr[r * B] = $EXP($SUB(xr[r * B], mx));", "softmax: barrier before the serial sum removed"),
    (f"{GT}/src/gtensor/ops/softmax.py",
     "            total = d;\n        }\n        __syncthreads();",
     "            total = d;\n        }", "softmax_grad: barrier after the dot removed"),
    (f"{GT}/src/gtensor/ops/softmax.py",
     "            total = s;\n        }\n        __syncthreads();",
     "            total = s;\n        }", "softmax: barrier after the sum removed"),
    (f"{GT}/src/gtensor/ops/softmax.py", "for (int h = nt / 2; h > 0; h >>= 1)",
     "for (int h = nt / 2; h > 1; h >>= 1)", "softmax: max tree stops one level early"),
    (f"{GT}/src/gtensor/ops/forms.py", "$BODY\n        __syncthreads();", "$BODY",
     "softmax rows: barrier between rows of one block removed"),
    (f"{GT}/src/gtensor/ops/inner.py", "acc = $MUL(a[0], b[0]);",
     "acc = $ADD(($T)0, $MUL(a[0], b[0]));", "matmul kernel: accumulator starts at +0.0"),
    (f"{GT}/src/gtensor/ops/reduce.py", "acc = (r == 0) ? x[off] : $ADD(acc, x[off]);",
     "acc = $ADD((r == 0) ? ($T)0 : acc, x[off]);", "reduce kernel: accumulator starts at +0.0"),
    (f"{GT}/src/gtensor/ops/forms.py", 'f"{indent}for (int d = rank - 1; d >= 0; --d) {{",',
     'f"{indent}for (int d = rank - 1; d > 0; --d) {{",',
     "zip form: outermost axis not indexed"),
    (f"{GT}/src/gtensor/ops/index.py", "acc = first ? v : $ADD(acc, v);",
     "acc = $ADD(acc, v);", "take_grad kernel: accumulator starts at +0.0"),
    (f"{GT}/src/gtensor/ops/index.py", "        for (long long j = 0; j < J; ++j) {\n"
     "            long long d = ids[j];", "        for (long long j = J - 1; j >= 0; --j) {\n"
     "            long long d = ids[j];", "take_grad kernel: contributions in reverse order"),
    (f"{GT}/src/gtensor/ops/index.py", "if (i < 0) i += N;\n        y[o] = (i >= 0 && i < N)",
     "y[o] = (i >= 0 && i < N)", "take kernel: negative ids not wrapped"),
    (f"{GT}/src/gtensor/ops/index.py", "else if (v > x[base + best * B]) best = r;",
     "else if (v >= x[base + best * B]) best = r;", "argmax kernel: ties give the last index"),
    (f"{GT}/src/gtensor/ops/logsoftmax.py", "mx = $ADD(buf[0], ($T)0);", "mx = buf[0];",
     "log_softmax kernel: a zero max keeps its sign"),
    (f"{GT}/src/gtensor/ops/logsoftmax.py", "$T d = gr[0];\n            for (long long r = 1;",
     "$T d = ($T)0;\n            for (long long r = 0;",
     "log_softmax_grad kernel: the sum starts at +0.0"),
    (COMMON_H, "_mm_setcsr(0x1F80);", "_mm_setcsr(0x9FC0);", "sim: FTZ/DAZ on during launches"),
    (SIM_H, "if (s.live > 1 && !GTSIM_SETJMP", "if (s.live > 2 && !GTSIM_SETJMP",
     "sim: barrier ignored with two live fibers"),
    (SIM_H, "order[i] = s.schedule == kReverse ? n - 1 - i : i;", "order[i] = i;",
     "sim: reverse schedule runs forward"),
    (SIM_H, "set_thread_index(s.order[t]);", "set_thread_index(t);",
     "sim: barrier-free threads not permuted"),
    (SIM_H, "if (s.schedule == kShuffle) make_order(s, s.order, s.nthreads);", "",
     "sim: shuffle keeps one order for every barrier phase"),
    (SIM_H, "if (s.schedule == kReverse) return nb - 1 - b;", "",
     "sim: reverse schedule keeps the block order"),
    (SIM_H, "threadIdx.y = (static_cast<unsigned>(linear) / bx) % by;",
     "threadIdx.y = (static_cast<unsigned>(linear) / bx) % bx;", "sim: threadIdx.y wrapped by x"),
    (COMMON_H, "if (d != d) return 0;", "if (d != d) return -1;", "sim: __double2ll_rz(NaN) != 0"),
    (COMMON_H, "static __forceinline__ float __fsqrt_rn(float a) { return std::sqrt(a); }",
     "static __forceinline__ float __fsqrt_rn(float a) { return (float)std::sqrt((double)a) "
     "* 1.0000001f; }", "sim: float sqrt off by an ulp"),
    (f"{OP}/src/gopt/adam.py", "eps=self._eps, alpha=slot.alpha, clip=clip)",
     "eps=self._eps, alpha=0.0, clip=clip)", "gopt: Adam's in-place update drops the L2 term"),
    (f"{OP}/src/gopt/sgd.py", "alpha=slot.alpha, clip=clip)", "alpha=slot.alpha, clip=False)",
     "gopt: SGD's in-place update ignores the clip"),
    (f"{OP}/src/gopt/gradients.py", 'ws(("sumsq", i), ())', 'ws("sumsq", ())',
     "gopt: the per-parameter sums of squares share one buffer"),
]

# The random ops' C text (gtensor.ops.random): the Philox helper and each kernel's statement,
# guarded by the backend-vs-numpy tests of the random ops on sim and cpu.
RNG_PY = f"{GT}/src/gtensor/ops/random.py"
RNG_KERNEL_RUNS = (Run((f"{GT}/tests/test_random.py",), "sim"),
                   Run((f"{GT}/tests/test_random.py",), "cpu"))
RNG_MUTANTS = [
    (RNG_PY, "(lh & 0xFFFFFFFFULL) + (hl & 0xFFFFFFFFULL)", "(lh & 0xFFFFFFFFULL)",
     "philox: mulhi drops a middle partial product's carry"),
    (RNG_PY, "return a_hi * b_hi + (lh >> 32) + (hl >> 32) + (mid >> 32);",
     "return a_hi * b_hi + (lh >> 32) + (hl >> 32);", "philox: mulhi drops the low carry"),
    (RNG_PY, "for (int r = 0; r < 10; ++r)", "for (int r = 0; r < 9; ++r)",
     "philox: nine rounds"),
    (RNG_PY, "k1 += 0xBB67AE8584CAA73BULL;", "k1 += 0x9E3779B97F4A7C15ULL;",
     "philox: the second key word bumped by the first Weyl constant"),
    (RNG_PY, "c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;",
     "c0 = hi0 ^ c1 ^ k0; c1 = lo1; c2 = hi1 ^ c3 ^ k1; c3 = lo0;",
     "philox: the round's high words swapped"),
    (RNG_PY, "(unsigned long long)(i >> 2) + 1ULL, 0ULL, w);",
     "(unsigned long long)(i >> 2), 0ULL, w);", "philox stream: counter not bumped first"),
    (RNG_PY, "return w[i & 3];", "return w[i & 1];", "philox stream: word index within block"),
    (RNG_PY, "(unsigned long long)(o >> 1) + 1ULL, 0ULL, w);",
     "(unsigned long long)(o >> 2) + 1ULL, 0ULL, w);", "normal kernel: wrong block per element"),
    (RNG_PY, "const int j = (int)(o & 1) * 2;", "const int j = (int)(o & 1);",
     "normal kernel: overlapping word pairs"),
    (RNG_PY, "gt_philox_block(key, (unsigned long long)i, $FOLD_TAG, w);",
     "gt_philox_block(key, (unsigned long long)i, 0ULL, w);",
     "fold kernel: the fold tag missing (a draw's block)"),
    (RNG_PY, "y[o] = a >= t ? $FN(x[o], s) : ($T)0;", "y[o] = a > t ? $FN(x[o], s) : ($T)0;",
     "dropout kernel: uniform == p dropped"),
    (RNG_PY, "y[o] = a >= t ? $FN(x[o], s) : ($T)0;",
     "y[o] = a >= t ? $FN(x[o], s) : $FN(x[o], ($T)0);",
     "dropout kernel: dropped elements x * 0 (NaN, -0 for specials)"),
    (RNG_PY, "const long long a = (long long)(gt_philox_word(key, o) >> 11);",
     "const long long a = (long long)(gt_philox_word(key, o) >> 12);",
     "dropout kernel: 52-bit uniforms"),
    (RNG_PY, "            if (b != cur) {", "            if (cur < 0) {",
     "cpu kernels: the cached Philox block never refreshed"),
    (RNG_PY, "            const long long b = o >> $PER;",
     "            const long long b = o >> 2;",
     "cpu kernels: normal's two outputs per block read as four"),
    (RNG_PY, 'UNIFORM_SHIFT = {dtypes.F64: 11, dtypes.F32: 40}',
     'UNIFORM_SHIFT = {dtypes.F64: 11, dtypes.F32: 41}',
     "uniform f32: 23 bits"),
]

# conv2d's and the pools' kernels (CUDA text run by sim, and the cpu loops), guarded by the
# loop oracles and rule tests of test_conv.py on both kernel backends
CONV_RUNS = (Run((f"{GT}/tests/test_conv.py",), "sim"), Run((f"{GT}/tests/test_conv.py",), "cpu"))
CV, PL = f"{GT}/src/gtensor/ops/conv.py", f"{GT}/src/gtensor/ops/pool.py"
AV = f"{GT}/src/gtensor/ops/avg_pool.py"
CONV_MUTANTS = [
    (CV, "acc = k == 0 ? p : $ADD(acc, p);", "acc = $ADD(acc, p);",
     "conv2d kernel: the chain starts at +0.0"),
    (CV, "const $T p = $MUL(wo[k], xv);",
     "const $T p = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? "
     "$MUL(wo[k], xv) : ($T)0;", "conv2d kernel: padding not multiplied"),
    (CV, "const $T* xg = x + (nn * C + (oc / Og) * Cg) * H * W;",
     "const $T* xg = x + (nn * C) * H * W;", "conv2d kernel: every group reads group 0"),
    (CV, "const long long yy = oy * sh + i * dil_h - ph, xx = ox * sw + j * dil_w - pw;",
     "const long long yy = oy * sh + i - ph, xx = ox * sw + j * dil_w - pw;",
     "conv2d kernel: the rows' dilation ignored"),
    (CV, "        for (long long i = 0; i < KH; ++i) {\n            const long long ty",
     "        for (long long i = KH - 1; i >= 0; --i) {\n            const long long ty",
     "conv2d_grad_input kernel: taps in reverse row order"),
    (CV, "product(w + gi * Og * K, g + (nn * O + gi * Og) * P, t, 1, K, Og, P, 1, 0,",
     "product(w + gi * Og * K, g + (nn * O + gi * Og) * P, t, 1, K, Og, P, 0, 0,",
     "cpu conv2d_grad_input: w read untransposed"),
    (CV, "product(cols, gm, dwt, 1, K, Q, Og, 0, 1, false);",
     "product(cols, gm, dwt, 1, K, Q - 1, Og, 0, 1, false);",
     "cpu conv2d_grad_weight: the last position left out of each chain"),
    (CV, "if (yy < 0 || yy >= H) continue;", "if (yy < 0 || yy > H) continue;",
     "cpu conv2d_grad_input: a tap past the bottom border kept"),
    (PL, "if (best < 0 || v > bv) {", "if (best < 0 || v >= bv) {",
     "max_pool2d: ties give the last element"),
    (PL, "if (yy < 0 || yy >= H) continue;\n        for (long long j",
     "if (yy < -1 || yy >= H) continue;\n        for (long long j",
     "max_pool2d: a padding row read as an element"),
    (PL, "if (v != v) return q;", "if (v != v) { best = q; bv = v; }",
     "max_pool2d: the last NaN wins"),
    (AV, "acc = $DIV(acc, ($T)divisor);", "acc = $DIV(acc, ($T)(KH * KW));",
     "avg_pool2d: the divisor ignores padding and count_include_pad"),
    (AV, "const long long he = hs + KH < H + ph ? hs + KH : H + ph;",
     "const long long he = hs + KH;", "avg_pool2d: a ceil-mode window counts past the padding"),
    (PL, "for (long long oy = oy0; oy <= oy1; ++oy)", "for (long long oy = oy1; oy >= oy0; --oy)",
     "pool gradients: windows in reverse row order"),
    (PL, "const long long oy0 = ty <= ey ? 0 : (ty - ey + sh - 1) / sh;",
     "const long long oy0 = ty <= ey ? 0 : (ty - ey + sh - 1) / sh + 1;",
     "pool gradients: the first covering window skipped"),
    (PL, "for (long long ox = 0; ox < OW; ++ox) {\n$WINDOW",
     "for (long long ox = OW - 1; ox >= 0; --ox) {\n$WINDOW",
     "cpu pool gradients: the windows of a row in reverse order"),
]

# The recording type (gtape.recording) and its users: a version not bumped, a dependency not
# declared, a key not compared. Entries as above plus the runs that guard them (replays run
# on kernel backends: the optimizer's on cpu, the device optimizer's and the fused on sim).
RP, FU = "packages/ggpu-replay", "packages/ggpu-fuse"
RECORDING_RUNS = (
    Run((f"{OP}/tests/test_gopt_config.py", f"{OP}/tests/test_replayed_step.py",
         f"{TP}/tests/test_recording.py", f"{TP}/tests/test_backward_replay.py",
         f"{TP}/tests/test_tape_reset.py"), "cpu"),
    Run((f"{RP}/tests/test_replay_stale.py", f"{RP}/tests/test_replay_stateful.py",
         f"{FU}/tests/test_fuse_transposes.py", f"{FU}/tests/test_fuse_reconfigured.py"), "sim"),
)
BASE, REC = f"{OP}/src/gopt/base.py", f"{TP}/src/gtape/recording.py"
RECORDING_MUTANTS = [
    (BASE, 'self._max_norm, self._clip_consts = None, None\n            self._versions["clip"]'
     '.bump()', "self._max_norm, self._clip_consts = None, None",
     "recording: set_clip(None) bumps no version"),
    (BASE, 'self._clip_consts = (self._ws.scalar(m), self._ws.scalar(1.0))\n        '
     'self._versions["clip"].bump()', "self._clip_consts = (self._ws.scalar(m), "
     "self._ws.scalar(1.0))", "recording: set_clip(m) bumps no version"),
    (BASE, '            self._lr = lr\n            self._versions["lr"].bump()',
     "            self._lr = lr", "recording: opt.lr = x bumps no version"),
    (BASE, '        slot.alpha = a\n        self._versions["alpha"].bump()',
     "        slot.alpha = a", "recording: set_alpha bumps no version"),
    (BASE, '        self._slots.append(slot)\n        self._versions["params"].bump()',
     "        self._slots.append(slot)", "recording: add bumps no version"),
    (f"{OP}/src/gopt/state.py", "    opt._configured()  # every configuration item may have moved",
     "", "recording: load_state_dict bumps no version"),
    (BASE, 'BAKED: tuple[str, ...] = ("lr", "clip", "alpha", "params")',
     'BAKED: tuple[str, ...] = ("lr", "alpha", "params")',
     "recording: the recorded update does not declare the clip"),
    (f"{OP}/src/gopt/sgd.py", 'BAKED = ("clip", "alpha", "params")',
     'BAKED = ("alpha", "params")', "recording: SGD's recorded update does not declare the clip"),
    (f"{OP}/src/gopt/adam.py", 'BAKED = ("betas", "eps", "clip", "alpha", "params")',
     'BAKED = ("betas", "eps", "clip", "params")',
     "recording: Adam's recorded update does not declare the alphas"),
    (f"{RP}/src/ggpu_replay/optim.py", 'f"the device step of {type(opt).__name__}", '
     "opt.recorded_deps)", 'f"the device step of {type(opt).__name__}", ())',
     "recording: the device segment declares no dependency"),
    (REC, "self._value is not _UNSET and self._stamp == self._versions()",
     "self._value is not _UNSET", "recording: fresh() ignores the versions"),
    (REC, "\n                and self._key == key)", ")", "recording: fresh() ignores the key"),
    (f"{TP}/src/gtape/tape.py", "held = self._zeroing.current(key)",
     "held = self._zeroing.held", "recording: the tape's zeroing ignores its buffers"),
    (f"{TP}/src/gtape/passes.py", "held = self._recorded.current(key) if",
     "held = self._recorded.held if", "recording: a backward pass ignores the graph's key"),
    (f"{FU}/src/ggpu_fuse/program.py", "key = tuple(id(launch) for launch in launches)\n"
     "        held", "key = phase\n        held", "recording: fused units ignore their launches"),
]

# Mutants reviewed as equivalent (no input gives another result): id -> why. Ids name lines of
# the reviewed commit; a later edit of the file can move them (they then count again).
TR = f"{GT}/src/gtensor/scalar/transcendental.py"
_OVERRIDDEN = "the clamp only feeds lanes that a later where() overrides"
PH = f"{GT}/src/gtensor/philox.py"
EQUIVALENT: dict[str, str] = {
    f"{GT}/src/gtensor/ops/random.py:327:11:0":
        "dropout's reference: x * s and s * x are one IEEE product (commutative)",
    f"{PH}:32:10:1": "mulhilo: uint64 additions wrap mod 2**64 (associative)",
    f"{PH}:33:9:1": "mulhilo: uint64 additions wrap mod 2**64 (associative)",
    f"{PH}:76:19:1": "words: Python int additions (exact, associative)",
    f"{PH}:74:27:0": "words: start // 5 blocks in; off = start - 4 * first_block compensates "
                     "and the extra blocks are sliced off",
    f"{PH}:75:14:0": "words: more blocks than needed, sliced off",
    f"{PH}:75:15:0": "words: more blocks than needed, sliced off",
    f"{PH}:75:51:0": "words: one block more than needed, sliced off",
    f"{PH}:49:43:0": "block: stacking at axis 1 is axis -1 for the (n, 4) counters every "
                     "caller passes",
    f"{PH}:56:23:0": "counters: a fifth column is never read (block reads columns 0..3)",
    f"{PH}:77:36:0": "words: numpy's reshape takes any negative size as the unknown one",
    f"{GT}/src/gtensor/ops/random.py:60:31:0":
        "f32 uniform: a * 2**-24 is exact in float64 and in float32; a constant one float64 "
        "ulp above moves the product by < 2**-52 relative, which the rounding to float32 "
        "removes",
    f"{GT}/src/gtensor/ops/select.py:77:68:0":
        "the cpu kernels given the CUDA body: the same arithmetic per output (cpu runs it as "
        "one grid), only not split across threads",
    f"{TP}/src/gtape/losses.py:53:30:0": "bce's z >= -0.0 is z >= +0.0 (IEEE: -0 == +0)",
    f"{TP}/src/gtape/losses.py:54:38:0":
        "bce's margin for z < 0: +-0.0 - z*y differ only in a zero's sign, which adding the "
        "soft term (> 0) removes",
    f"{GT}/src/gtensor/ops/logsoftmax.py:177:11:1":
        "logsumexp's backward: the kept shape is a tuple concatenation (associative)",
    f"{TR}:207:63:0": f"exp: clamp at -745.25; {_OVERRIDDEN} (x < EXP_U_THRESHOLD -> +0)",
    f"{TR}:289:22:0": f"expm1: NaN lanes replaced by 0.0 or -0.0; {_OVERRIDDEN} (NaN -> x + x)",
    f"{TR}:290:48:0": f"expm1: clamp at -45; {_OVERRIDDEN} (x <= -38.8 -> -1)",
    f"{TR}:290:60:0": f"expm1: clamp at -45; {_OVERRIDDEN} (x <= -38.8 -> -1)",
    f"{TR}:290:61:0": f"expm1: clamp at -45; {_OVERRIDDEN} (x <= -38.8 -> -1)",
    f"{TR}:306:17:0": "expm1: kc only feeds 2**-k, used by the 2 <= k <= 56 lanes",
    f"{TR}:306:21:0": "expm1: kc only feeds 2**-k, used by the 2 <= k <= 56 lanes",
    f"{TR}:315:18:0": "expm1: changes only x = +-2**-54, where both lanes give x (pinned)",
    f"{TR}:382:21:0": "tanh: changes only x = +-0.75, where both lanes agree (pinned)",
    f"{TR}:405:16:0": f"sigmoid: clamp at -746; {_OVERRIDDEN} (x < EXP_U_THRESHOLD -> +0)",
    f"{TR}:405:21:0": f"sigmoid: clamp at -746; {_OVERRIDDEN} (x < EXP_U_THRESHOLD -> +0)",
    f"{TR}:90:19:0": "_scale_dd at h == 2**-1022: both lanes round on the same 2**-1074 grid "
                     "(and no input near log(2**-1022) differs: 6e6 tried)",
    f"{GT}/src/gtensor/ops/reduce.py:63:56:0": "reshape(-2, n): numpy takes any negative "
                                                 "size as the unknown one",
    f"{GT}/src/gtensor/ops/softmax.py:155:11:0": "MUL(y, g - d) == MUL(g - d, y): IEEE * "
                                                  "commutes",
    f"{OP}/src/gopt/base.py:177:85:0": "set_clip's bound low=-0.0: x > -0.0 is x > 0.0",
    f"{OP}/src/gopt/base.py:222:63:0": "getattr default for a tape without backward_count; "
                                       "every gtape.Tape has one",
    f"{TP}/src/gtape/backward.py:51:30:0": "reach list one entry longer: the entry past the "
                                           "loss is never read",
    f"{TP}/src/gtape/backward.py:78:15:0": "i >= loss zero-fills the loss itself only when it "
                                           "is a parameter, whose gradient is copied in after",
}
# Mutants whose change lies far below the last bit of every result (a compensated or
# double-double term), measured: id -> evidence. Not counted either, but listed apart.
INVISIBLE: dict[str, str] = {
    f"{TR}:140:18:0": "exp: 1.0 -> 1+2**-52 in rc*(1 + r), a term ~2**-53 of r: moves the "
                      "exact sum by < 2**-100 relative; 0 of 2e6 inputs in [-700, 700] differ",
    f"{TR}:395:8:0": "tanh: q = 2/d off by an ulp is corrected exactly by the Dekker residual "
                     "w_lo; 0 of 2e6 inputs in [0.7, 22.5] differ",
}

# IEEE + and * commute bitwise (NaN compared by class): swapping their arguments is equivalent
COMMUTATIVE = {"add", "mul", "multiply", "maximum", "minimum"}

BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
          ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.RShift: ast.LShift,
          ast.LShift: ast.RShift, ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv}
CMPOPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
          ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SYM = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.BitAnd: "&", ast.BitOr: "|",
       ast.RShift: ">>", ast.LShift: "<<", ast.FloorDiv: "//", ast.Mod: "%", ast.Lt: "<",
       ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
       ast.IsNot: "is not"}


@dataclass
class Mutant:
    """One change to one file."""

    id: str
    path: str
    line: int
    what: str
    source: str  # the whole mutated file
    runs: tuple[Run, ...]
    killed: bool | None = None
    seconds: float = 0.0
    detail: str = field(default="", repr=False)


# --------------------------------------------------------------------------- AST mutants
def _in_scope(tree: ast.Module, target: Target) -> set[int]:
    """ids of the nodes that may be mutated: in the named functions, lambdas, constants."""
    scope: set[int] = set()

    def take(node: ast.AST) -> None:
        for sub in ast.walk(node):
            scope.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.name in target.functions:
            for stmt in node.body:
                take(stmt)
        elif isinstance(node, ast.Lambda) and "*" in target.functions:
            take(node.body)
    if target.constants:
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and all(
                    isinstance(t, ast.Name) and t.id.isupper() for t in stmt.targets):
                take(stmt.value)
    # never strings, docstrings, f-strings, raise statements or assert messages
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Raise, ast.Assert)):
            for sub in ast.walk(node):
                scope.discard(id(sub))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            scope.discard(id(node.value))
    return scope


def _changes(node: ast.AST, compared: set[int]) -> list[tuple[str, callable]]:
    """Possible mutations of one node: (description, apply() -> undo()).

    ``compared``: ids of the constants that are operands of a comparison.
    """
    out = []

    def setter(obj, attr, value):
        def apply():
            old = getattr(obj, attr)
            setattr(obj, attr, value)
            return lambda: setattr(obj, attr, old)
        return apply

    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        new = BINOPS[type(node.op)]
        out.append((f"{SYM[type(node.op)]} -> {SYM[new]}", setter(node, "op", new())))
        for side, other in (("right", "left"), ("left", "right")):
            inner = getattr(node, side)
            if isinstance(inner, ast.BinOp) and type(inner.op) is type(node.op) and \
                    isinstance(node.op, (ast.Add, ast.Mult)):
                out.append((f"reassociate {SYM[type(node.op)]} ({side} nested)",
                             _reassociate(node, side, other)))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in CMPOPS:
        new = CMPOPS[type(node.ops[0])]
        out.append((f"{SYM[type(node.ops[0])]} -> {SYM[new]}", setter(node, "ops", [new()])))
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        v = node.value
        if isinstance(v, float):
            if v == 0.0 and id(node) in compared:
                pass  # x < 0.0 and x < -0.0 are the same test (equivalent by IEEE)
            elif v == 0.0:
                out.append((f"{v!r} -> {-v!r}", setter(node, "value", -v)))
            elif math.isfinite(v):
                w = math.nextafter(v, math.inf)
                out.append((f"{v!r} -> {w!r} (last bit)", setter(node, "value", w)))
        elif not isinstance(v, bool):
            out.append((f"{v} -> {v + 1}", setter(node, "value", v + 1)))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        out.append((f"{node.value} -> {not node.value}", setter(node, "value", not node.value)))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        out.append(("drop unary " + ("-" if isinstance(node.op, ast.USub) else "not"),
                    setter(node, "op", ast.UAdd()) if isinstance(node.op, ast.USub)
                    else _replace_not(node)))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        out.append(("and <-> or", setter(node, "op", new())))
    elif isinstance(node, ast.IfExp):
        out.append(("swap if/else branches", _swap(node, "body", "orelse")))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            len(node.args) >= 2 and node.func.attr not in COMMUTATIVE and \
            not _commutative_scalar_fn(node.func):
        i, j = (1, 2) if node.func.attr == "where" and len(node.args) == 3 else (0, 1)
        out.append((f"swap arguments {i}, {j} of .{node.func.attr}()", _swap_args(node, i, j)))
    return out


def _commutative_scalar_fn(func: ast.Attribute) -> bool:
    """``ADD[ft].numpy`` / ``MUL[ft].numpy``: scalar functions whose arguments commute."""
    v = func.value
    return (func.attr == "numpy" and isinstance(v, ast.Subscript)
            and isinstance(v.value, ast.Name) and v.value.id in ("ADD", "MUL"))


def _reassociate(node: ast.BinOp, side: str, other: str):
    def apply():
        old = (node.left, node.right)
        inner = getattr(node, side)
        if side == "right":  # a op (b op c) -> (a op b) op c
            node.left = ast.BinOp(node.left, inner.op, inner.left)
            node.right = inner.right
        else:  # (a op b) op c -> a op (b op c)
            node.right = ast.BinOp(inner.right, inner.op, node.right)
            node.left = inner.left
        return lambda: (setattr(node, "left", old[0]), setattr(node, "right", old[1]))
    return apply


def _replace_not(node: ast.UnaryOp):
    def apply():
        old = node.op
        node.op = ast.UAdd()
        return lambda: setattr(node, "op", old)
    return apply


def _swap(node: ast.AST, a: str, b: str):
    def apply():
        va, vb = getattr(node, a), getattr(node, b)
        setattr(node, a, vb)
        setattr(node, b, va)
        return lambda: (setattr(node, a, va), setattr(node, b, vb))
    return apply


def _swap_args(node: ast.Call, i: int, j: int):
    def apply():
        node.args[i], node.args[j] = node.args[j], node.args[i]
        return lambda: _swap_back(node, i, j)
    return apply


def _swap_back(node: ast.Call, i: int, j: int) -> None:
    node.args[i], node.args[j] = node.args[j], node.args[i]


def ast_mutants(root: Path, target: Target) -> list[Mutant]:
    """Every AST mutant of one target file (sources produced with ast.unparse)."""
    text = (root / target.path).read_text()
    tree = ast.parse(text)
    scope = _in_scope(tree, target)
    compared = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for c in [node.left, *node.comparators]}
    out: list[Mutant] = []
    seen: set[str] = set()
    baseline = ast.unparse(tree)
    for node in ast.walk(tree):
        if id(node) not in scope:
            continue
        for k, (what, apply) in enumerate(_changes(node, compared)):
            undo = apply()
            try:
                src = ast.unparse(ast.fix_missing_locations(tree))
            finally:
                undo()
            line = getattr(node, "lineno", 0)
            mid = f"{target.path}:{line}:{getattr(node, 'col_offset', 0)}:{k}"
            if src == baseline or src in seen:
                continue
            seen.add(src)
            out.append(Mutant(mid, target.path, line, what, src, target.runs))
    return out


def text_mutants(root: Path) -> list[Mutant]:
    """The hand-written mutants of kernel sources and the simulator runtime."""
    out = []
    entries = [(*e, None, "text") for e in TEXT_MUTANTS] + [
        (*e, RECORDING_RUNS, f"rec{k}") for k, e in enumerate(RECORDING_MUTANTS)] + [
        (*e, RNG_KERNEL_RUNS, f"rng{k}") for k, e in enumerate(RNG_MUTANTS)] + [
        (*e, CONV_RUNS, f"conv{k}") for k, e in enumerate(CONV_MUTANTS)]
    for path, old, new, what, guard, tag in entries:
        text = (root / path).read_text()
        if old not in text:
            print(f"mutants: text mutant {what!r} does not apply to {path} (skipped)",
                  file=sys.stderr)
            continue
        line = text[:text.index(old)].count("\n") + 1
        runs = (guard if guard is not None else (RUNTIME_RUN, SIM_PARITY)
                if path in (SIM_H, COMMON_H) else
                (GOPT_RUN,) if path.startswith(OP) else KERNEL_RUNS)
        out.append(Mutant(f"{path}:{line}:{tag}", path, line, what, text.replace(old, new, 1),
                          runs))
    return out


# --------------------------------------------------------------------------- running
def copy_tree(dest: Path, worktree: bool) -> None:
    """The committed tree (git archive HEAD), or the working tree's files, into ``dest``."""
    if worktree:
        for name in ("packages", "tests-integration", "pyproject.toml"):
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis"))
            elif src.exists():
                shutil.copy2(src, dest / name)
        return
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def environment(tmp: Path, run: Run) -> dict[str, str]:
    """The copy's sources first on the path, a private kernel cache, the run's backend."""
    env = dict(os.environ)
    srcs = [str(p) for p in sorted((tmp / "packages").glob("*/src"))]
    env["PYTHONPATH"] = os.pathsep.join(srcs + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["GTENSOR_CACHE_DIR"] = str(tmp / ".gtensor-cache")
    env["GRAD_TEST_BACKEND"] = run.backend
    env["HYPOTHESIS_PROFILE"] = "ci"
    env.pop("GTENSOR_SIM_SCHEDULE", None)
    env.update(dict(run.env))
    return env


def run_tests(tmp: Path, runs: tuple[Run, ...], timeout: float) -> tuple[bool, str]:
    """(all passed, the tail of the first failing run's output)."""
    for run in runs:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "--no-header", *run.tests]
        try:
            proc = subprocess.run(cmd, cwd=tmp, env=environment(tmp, run), capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"timeout after {timeout:.0f} s"
        if proc.returncode != 0:
            return False, (proc.stdout + proc.stderr)[-600:]
    return True, ""


def main(argv: list[str] | None = None) -> int:
    """Generate, run and report; exit 0 when the score reaches --goal."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=0, help="run a seeded sample of N mutants")
    ap.add_argument("--cap", type=int, default=0,
                    help="at most N mutants per file (a seeded sample of each larger file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="only files whose path contains this")
    ap.add_argument("--text-only", action="store_true", help="only the hand-written mutants")
    ap.add_argument("--match", default="",
                    help="only mutants whose description contains this (e.g. 'recording:')")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--worktree", action="store_true",
                    help="mutate a copy of the working tree instead of HEAD")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    ap.add_argument("--goal", type=float, default=0.0, help="minimum score (0..1) to exit 0")
    ap.add_argument("--report", type=Path, help="also write the report (markdown) here")
    args = ap.parse_args(argv)

    # SIGTERM (a CI timeout, kill PID) still removes the copy: the finally below runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="grad-mutants-"))
    try:
        copy_tree(tmp, args.worktree)
        mutants = [m for t in TARGETS if args.only in t.path and not args.text_only
                   for m in ast_mutants(tmp, t)]
        mutants += [m for m in text_mutants(tmp) if args.only in m.path]
        mutants = [m for m in mutants if args.match in m.what]
        total = len(mutants)
        if args.cap:
            rng = random.Random(args.seed)
            capped = []
            for path in dict.fromkeys(m.path for m in mutants):
                ms = [m for m in mutants if m.path == path]
                capped += ms if len(ms) <= args.cap else sorted(
                    rng.sample(ms, args.cap), key=lambda m: m.line)
            mutants = capped
        if args.sample and args.sample < len(mutants):
            mutants = sorted(random.Random(args.seed).sample(mutants, args.sample),
                             key=lambda m: (m.path, m.line))
        if args.list:
            for m in mutants:
                print(f"{m.id}  {m.what}")
            print(f"{len(mutants)} of {total} mutants")
            return 0
        print(f"mutants: {len(mutants)} of {total} in {tmp}", flush=True)
        # the baseline runs on the unparsed form of every AST target (what mutants start from)
        originals = {t.path: (tmp / t.path).read_text() for t in TARGETS}
        for path, text in originals.items():
            (tmp / path).write_text(ast.unparse(ast.parse(text)))
        try:
            ok, out = run_tests(tmp, tuple({r for t in TARGETS for r in t.runs}
                                           | {SIM_PARITY, RUNTIME_RUN}), args.timeout)
        finally:
            for path, text in originals.items():
                (tmp / path).write_text(text)
        if not ok:
            print(f"mutants: the unmutated copy fails its tests:\n{out}", file=sys.stderr)
            return 2
        for n, m in enumerate(mutants, 1):
            path = tmp / m.path
            original = path.read_text()
            path.write_text(m.source)
            t0 = time.perf_counter()
            try:
                passed, m.detail = run_tests(tmp, m.runs, args.timeout)
            finally:
                path.write_text(original)
            m.killed, m.seconds = not passed, time.perf_counter() - t0
            state = "killed" if m.killed else "SURVIVED"
            print(f"[{n}/{len(mutants)}] {state:8} {m.seconds:5.1f}s {m.id}  {m.what}",
                  flush=True)
        report = render(mutants, total, args)
        print(report)
        if args.report:
            args.report.write_text(report)
        return 0 if score(mutants)[0] >= args.goal else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def score(mutants: list[Mutant]) -> tuple[float, int, int]:
    """(killed share of the non-equivalent mutants, killed, non-equivalent count)."""
    counted = [m for m in mutants if m.id not in EQUIVALENT and m.id not in INVISIBLE]
    killed = sum(bool(m.killed) for m in counted)
    return (killed / len(counted) if counted else 1.0), killed, len(counted)


def render(mutants: list[Mutant], total: int, args: argparse.Namespace) -> str:
    """A markdown report: score, per-file counts, survivors."""
    share, killed, counted = score(mutants)
    lines = [f"mutation score: {killed}/{counted} = {share:.1%} of non-equivalent mutants "
             f"killed ({len(mutants)} run of {total}; cap={args.cap or 'none'}, "
             f"sample={args.sample or 'all'}, seed={args.seed})", "",
             "| file | killed | run |", "|---|---|---|"]
    for path in sorted({m.path for m in mutants}):
        ms = [m for m in mutants if m.path == path and m.id not in EQUIVALENT
              and m.id not in INVISIBLE]
        lines.append(f"| {path} | {sum(bool(m.killed) for m in ms)} | {len(ms)} |")
    survivors = [m for m in mutants if not m.killed and m.id not in EQUIVALENT
                 and m.id not in INVISIBLE]
    lines += ["", f"survivors ({len(survivors)}):"]
    lines += [f"- {m.id}: {m.what}" for m in survivors]
    for title, table in (("equivalent", EQUIVALENT), ("below the last bit", INVISIBLE)):
        ms = [m for m in mutants if m.id in table]
        if ms:
            lines += ["", f"{title} (not counted):"]
            lines += [f"- {m.id}: {m.what} ({table[m.id]})" for m in ms]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
