-- requires: lib/steps.sql lib/gpu_activity.sql
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
--   step          the ProfilerStep whose window contains its start (NULL if none)
--   arch_prefix   the architecture cuBLAS/cuDNN put in front of the name ('volta', 'turing',
--                 'ampere', 'sm90', ...), NULL when the name has none
CREATE OR REPLACE MACRO fp32_matmul_kernels(run) AS TABLE
WITH k AS (
    SELECT rank, device, name, start_ns, end_ns, dur_ns
    FROM gpu_activity(run)
    WHERE counted AND kind = 'kernel' AND category = 'compute'
      -- cheap tests first, then the exclusions (tensor-core kernels whose names also say gemm)
      -- (xmma kernels name their math types: f32f32_f32f32_f32 is FP32 math, f32f32_tf32f32_f32 TF32)
      AND (contains(name, 'sgemm') OR contains(name, 'scudnn') OR contains(name, '_simt_')
           OR contains(name, 'f32f32_f32f32_f32'))
      AND NOT regexp_matches(lower(name), '(tensorop|tf32|hmma|wmma|bf16|f16|fp16|half|1688|16816|884)')
)
SELECT k.rank, k.device, k.name, k.start_ns, k.end_ns, k.dur_ns,
       CASE WHEN k.start_ns < st.end_ns THEN st.step END AS step,
       nullif(regexp_extract(k.name, '^(maxwell|pascal|volta|turing|ampere|ada|hopper|sm\d+)_', 1), '') AS arch_prefix
FROM k ASOF LEFT JOIN steps(run) st ON k.rank = st.rank AND k.start_ns >= st.start_ns;


-- fp32_matmul_by_rank(run): per rank, what the FP32 SIMT matmuls take.
-- Columns:
--   rank, kernels, fp32_ns (summed kernel time), compute_kernel_ns (all compute kernels, summed)
--   tf32_kernels   compute kernels running FP32 data on TF32 tensor cores (TF32 is on)
--   arch_prefixes  LIST of the architecture prefixes seen (see above)
--   top_kernels    LIST of {name, calls, ns}, the 5 costliest names
--   worst_step     the step with most FP32 matmul time; longest_start_ns / longest_end_ns: the
--                  longest such kernel (a window to look at)
CREATE OR REPLACE MACRO fp32_matmul_by_rank(run) AS TABLE
WITH k AS (
    SELECT * FROM fp32_matmul_kernels(run)
), per_name AS (
    SELECT rank, name, count(*) AS calls, sum(dur_ns) AS ns FROM k GROUP BY rank, name
), top AS (
    SELECT rank, list({'name': name, 'calls': calls, 'ns': ns} ORDER BY ns DESC, name)[1:5] AS top_kernels
    FROM per_name GROUP BY rank
), per_step AS (
    SELECT rank, step, sum(dur_ns) AS ns FROM k WHERE step IS NOT NULL GROUP BY rank, step
), worst AS (
    SELECT rank, arg_max(step, (ns, -step)) AS worst_step FROM per_step GROUP BY rank
), compute AS (
    SELECT rank, sum(dur_ns) AS compute_kernel_ns,
           -- FP32 data on TF32 tensor cores (xmma/cutlass names say tf32, cuBLAS's s1688/s16816 tensor ops)
           count(*) FILTER (WHERE contains(name, 'tf32') OR regexp_matches(name, 'tensorop_s(1688|16816)')) AS tf32_kernels
    FROM gpu_activity(run) WHERE counted AND kind = 'kernel' AND category = 'compute' GROUP BY rank
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
