-- requires: lib/intervals.sql lib/steps.sql lib/gpu_activity.sql lib/gpu_steps.sql
-- FP32 matrix multiplies and convolutions on CUDA cores (analysis: fp32_matmul).
--
-- A GEMM or convolution in plain FP32 runs on the GPU's CUDA cores (cuBLAS "sgemm", cuDNN
-- "scudnn"/"convolve_sgemm", CUTLASS "simt" kernels) at a fraction of what tensor cores do with
-- TF32 (Ampere and newer) or FP16/BF16 (Volta and newer): NVIDIA's peak ratios are ~8x (V100
-- FP16 125 vs FP32 15.7 TFLOP/s, A100 TF32 156 vs 19.5, H100 TF32 495 vs 67). PyTorch keeps
-- FP32 matmuls off TF32 by default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12), so
-- this is what an FP32 model on an A100/H100 does unless told otherwise. Kernel names are the
-- only evidence a trace carries of the math mode; tensor-core kernels say so in their names
-- (tensorop, tf32, hmma, f16/bf16 math types, s1688/h884 shapes) and are left out.


-- fp32_matmul_kernels(run): every counted compute kernel that is an FP32 SIMT GEMM or convolution.
-- Columns:
--   rank, device, name, start_ns, end_ns, dur_ns
--   in_steps_ns   how much of it ran inside the rank's steps on the GPU clock (lib/gpu_steps.sql;
--                 a rank without steps has one pseudo-step over its GPU span): what per-step
--                 figures count, so start-up and the tail after the last step are no step's cost
--   step          the step whose GPU-clock window contains its start (NULL if none)
--   arch_prefix   the architecture cuBLAS/cuDNN put in front of the name ('volta', 'turing',
--                 'ampere', 'sm90', ...), NULL when the name has none
CREATE OR REPLACE MACRO fp32_matmul_kernels(run) AS TABLE
WITH k AS MATERIALIZED (
    SELECT row_number() OVER () AS kernel_no, rank AS grp, rank, device, name, start_ns, end_ns, dur_ns
    FROM gpu_activity(run)
    WHERE counted AND kind = 'kernel' AND category = 'compute' AND is_fp32_simt_matmul(name)
), step_windows AS MATERIALIZED (
    SELECT rank AS grp, rank, step, start_ns, end_ns FROM gpu_steps(run)
), inside AS (
    SELECT kernel_no, sum(end_ns - start_ns) AS in_steps_ns FROM interval_clip('k', 'step_windows') GROUP BY kernel_no
)
SELECT k.rank, k.device, k.name, k.start_ns, k.end_ns, k.dur_ns,
       coalesce(i.in_steps_ns, 0)::BIGINT AS in_steps_ns,
       CASE WHEN k.start_ns < st.end_ns THEN st.step END AS step,
       nullif(regexp_extract(k.name, '^(maxwell|pascal|volta|turing|ampere|ada|hopper|sm\d+)_', 1), '') AS arch_prefix
FROM k
LEFT JOIN inside i ON i.kernel_no = k.kernel_no
ASOF LEFT JOIN step_windows st ON k.rank = st.rank AND k.start_ns >= st.start_ns;


-- fp32_matmul_by_rank(run): per rank, what the FP32 SIMT matmuls take inside its steps (on the
-- GPU clock: fp32_matmul_kernels.in_steps_ns), so that totals / steps is per step whether the
-- steps are ProfilerSteps or inferred iterations. Ranks with no FP32 matmul inside a step have no row.
-- Columns:
--   rank, kernels (that ran at least partly inside a step), fp32_ns (their time inside steps),
--   compute_kernel_ns (all compute kernels' time inside steps)
--   tf32_kernels   compute kernels running FP32 data on TF32 tensor cores (TF32 is on), inside steps
--   arch_prefixes  LIST of the architecture prefixes seen (see above)
--   top_kernels    LIST of {name, calls, ns}, the 5 costliest names
--   worst_step     the step with most FP32 matmul time; longest_start_ns / longest_end_ns: the
--                  longest such kernel (a window to look at)
CREATE OR REPLACE MACRO fp32_matmul_by_rank(run) AS TABLE
WITH k AS (
    SELECT * REPLACE (in_steps_ns AS dur_ns) FROM fp32_matmul_kernels(run) WHERE in_steps_ns > 0
), per_name AS (
    SELECT rank, name, count(*) AS calls, sum(dur_ns) AS ns FROM k GROUP BY rank, name
), top AS (
    SELECT rank, list({'name': name, 'calls': calls, 'ns': ns} ORDER BY ns DESC, name)[1:5] AS top_kernels
    FROM per_name GROUP BY rank
), per_step AS (
    SELECT rank, step, sum(dur_ns) AS ns FROM k WHERE step IS NOT NULL GROUP BY rank, step
), worst AS (
    SELECT rank, arg_max(step, (ns, -step)) AS worst_step FROM per_step GROUP BY rank
), compute_kernels AS (
    SELECT rank AS grp, start_ns, end_ns, is_tf32_kernel(name) AS is_tf32
    FROM gpu_activity(run) WHERE counted AND kind = 'kernel' AND category = 'compute'
), step_windows AS (
    SELECT rank AS grp, start_ns, end_ns FROM gpu_steps(run)
), compute AS (
    SELECT grp AS rank, sum(end_ns - start_ns) AS compute_kernel_ns, count(*) FILTER (WHERE is_tf32) AS tf32_kernels
    FROM interval_clip('compute_kernels', 'step_windows') GROUP BY grp
)
SELECT k.rank, count(*) AS kernels, sum(k.dur_ns) AS fp32_ns, any_value(c.compute_kernel_ns) AS compute_kernel_ns,
       any_value(c.tf32_kernels) AS tf32_kernels,
       list(DISTINCT k.arch_prefix) FILTER (WHERE k.arch_prefix IS NOT NULL) AS arch_prefixes,
       any_value(t.top_kernels) AS top_kernels, any_value(w.worst_step) AS worst_step,
       arg_max(k.start_ns, (k.dur_ns, -k.start_ns)) AS longest_start_ns,
       arg_max(k.end_ns, (k.dur_ns, -k.start_ns)) AS longest_end_ns
FROM k
LEFT JOIN compute c ON c.rank = k.rank
LEFT JOIN top t ON t.rank = k.rank
LEFT JOIN worst w ON w.rank = k.rank
GROUP BY k.rank;
