-- requires: lib/kernel_taxonomy.sql
-- Per-op performance model: FLOPs and bytes moved of each GEMM, convolution, attention,
-- normalisation and elementwise op from its recorded shapes and dtypes (record_shapes=True:
-- args "Input Dims", "Input type", "Concrete Inputs"), the GPU time of the work it launched, and so
-- its achieved TFLOP/s and TB/s, against the GPU's peak (gpu_peaks) and its roofline. The same
-- counting as AMD TraceLens' perf report (its GEMM, CONV_fwd and SDPA_fwd tables):
--   GEMM  aten::addmm / mm / bmm / baddbmm / _scaled_mm, A [b,M,K] x B [b,K,N]:
--         FLOPs 2bMNK (+ bMN for the bias add); bytes (A + B + C + bias) x element size
--   CONV  aten::convolution (1-3 spatial dims), x [N,C,*], w [K,C/g,*]: FLOPs 2 N K prod(out) (C/g) prod(kernel);
--         bytes (x + w + y) x element size; transposed convolutions are not modelled
--   SDPA  aten::_scaled_dot_product_{flash,efficient,cudnn}_attention, q [B,H,Nq,d], k/v [B,Hkv,Nkv,d(v)]:
--         FLOPs 2 B H Nq Nkv (d + dv), halved when causal; bytes (q + k + v + out) x element size
--   NORM  aten::native_layer_norm / native_batch_norm / native_group_norm: bytes (read x, write y,
--         the affine parameters); FLOPs ~5 per element (mean, variance, normalise, scale, shift)
--   ELEMENTWISE  add, sub, mul, div, gelu, silu, relu, tanh, sigmoid (and their in-place forms):
--         bytes (every tensor input + the output, broadcast to the largest input); FLOPs 1 per output element
-- An op's GPU time is all the GPU work (kernels, copies, sets) launched while it ran on its thread
-- (op_perf_launches): the op's subtree, as TraceLens' "kernel time" (a cuDNN convolution's layout
-- transposes included).


-- dtype_bytes(t): bytes per element of a profiler "Input type" string (c10::BFloat16, float, ...); NULL for non-tensors.
CREATE OR REPLACE MACRO dtype_bytes(t) AS
    CASE WHEN t IN ('c10::BFloat16', 'c10::Half', 'short', 'unsigned short') THEN 2
         WHEN t IN ('float', 'int', 'unsigned int', 'c10::complex<c10::Half>') THEN 4
         WHEN t IN ('double', 'long int', 'long', 'int64_t', 'c10::complex<float>') THEN 8
         WHEN t IN ('bool', 'unsigned char', 'signed char', 'char') OR starts_with(t, 'c10::Float8') THEN 1
         WHEN starts_with(t, 'c10::Float4') THEN 0.5 END;


-- dtype_label(t): 'bf16' | 'fp16' | 'fp32' | 'fp8' | 'fp4' | 'fp64' | 'int' for a profiler "Input type".
CREATE OR REPLACE MACRO dtype_label(t) AS
    CASE WHEN t = 'c10::BFloat16' THEN 'bf16' WHEN t = 'c10::Half' THEN 'fp16' WHEN t = 'float' THEN 'fp32'
         WHEN t = 'double' THEN 'fp64' WHEN starts_with(t, 'c10::Float8') THEN 'fp8'
         WHEN starts_with(t, 'c10::Float4') THEN 'fp4' WHEN t IS NOT NULL AND t <> '' THEN 'int' END;


-- numel(dims): elements of a tensor of these dims (1 for a 0-d tensor).
CREATE OR REPLACE MACRO numel(dims) AS
    CASE WHEN dims IS NULL THEN NULL WHEN len(dims) = 0 THEN 1 ELSE list_reduce(dims, lambda a, b: a * b) END;


-- gpu_peaks(): per-GPU peak dense throughput and memory bandwidth, from the vendors' datasheets
-- (dense: without 2:4 sparsity). Matched against the trace's deviceProperties name (pattern, lower
-- case regex; first match in priority order).
-- Columns: priority, pattern, gpu, bf16_tflops (FP16/BF16 tensor/matrix cores), fp8_tflops,
--   fp4_tflops, tf32_tflops, fp32_tflops (FP32 vector), hbm_tbps, source
CREATE OR REPLACE MACRO gpu_peaks() AS TABLE
SELECT * FROM (VALUES
    (1, 'b200', 'NVIDIA B200', 2250.0, 4500.0, 9000.0, 1100.0, 75.0, 8.0, 'NVIDIA HGX B200 datasheet (8-GPU figures / 8, dense)'),
    (2, 'h200', 'NVIDIA H200 SXM', 989.4, 1978.9, NULL, 494.7, 66.9, 4.8, 'NVIDIA H200 Tensor Core GPU datasheet'),
    (3, 'h100.*pcie', 'NVIDIA H100 PCIe', 756.0, 1513.0, NULL, 378.0, 51.0, 2.0, 'NVIDIA H100 Tensor Core GPU datasheet'),
    (4, 'h100', 'NVIDIA H100 SXM', 989.4, 1978.9, NULL, 494.7, 66.9, 3.35, 'NVIDIA H100 Tensor Core GPU datasheet'),
    (5, 'a100.*(80gb|sxm4-80)', 'NVIDIA A100 80GB', 312.0, NULL, NULL, 156.0, 19.5, 2.039, 'NVIDIA A100 Tensor Core GPU datasheet'),
    (6, 'a100', 'NVIDIA A100 40GB', 312.0, NULL, NULL, 156.0, 19.5, 1.555, 'NVIDIA A100 Tensor Core GPU datasheet'),
    (7, 'v100', 'NVIDIA V100 SXM2', 125.0, NULL, NULL, NULL, 15.7, 0.9, 'NVIDIA Tesla V100 datasheet'),
    (8, 'l40s', 'NVIDIA L40S', 362.05, 733.0, NULL, 183.0, 91.6, 0.864, 'NVIDIA L40S datasheet'),
    (9, 'mi325', 'AMD Instinct MI325X', 1307.4, 2614.9, NULL, 653.7, 163.4, 6.0, 'AMD Instinct MI325X datasheet'),
    (10, 'mi300x', 'AMD Instinct MI300X', 1307.4, 2614.9, NULL, 653.7, 163.4, 5.3, 'AMD Instinct MI300X datasheet'),
    (11, 'mi250x', 'AMD Instinct MI250X', 383.0, NULL, NULL, NULL, 47.9, 3.2768, 'AMD Instinct MI250X datasheet'),
    (12, 'mi250', 'AMD Instinct MI250', 362.1, NULL, NULL, NULL, 45.3, 3.2768, 'AMD Instinct MI250 datasheet')
) AS t(priority, pattern, gpu, bf16_tflops, fp8_tflops, fp4_tflops, tf32_tflops, fp32_tflops, hbm_tbps, source);


-- run_gpu_peak(run): the peak row of the run's GPU (its first rank with deviceProperties), or no row.
-- Columns: device_name and gpu_peaks' columns
CREATE OR REPLACE MACRO run_gpu_peak(run) AS TABLE
WITH device AS (
    SELECT json_extract_string(device_properties, '$[0].name') AS device_name FROM ranks
    WHERE run_id = run AND json_extract_string(device_properties, '$[0].name') IS NOT NULL
    ORDER BY rank LIMIT 1
)
SELECT d.device_name, p.* FROM device d JOIN gpu_peaks() p ON regexp_matches(lower(d.device_name), p.pattern)
ORDER BY p.priority LIMIT 1;


-- conv_out_spatial(x, w, concrete): a convolution's output spatial dims from x [N,C,*], w [K,C/g,*]
-- and aten::convolution's Concrete Inputs (stride, padding, dilation at positions 4-6).
CREATE OR REPLACE MACRO conv_out_spatial(x, w, concrete) AS
    list_transform(range(1, len(x) - 1), lambda i:
        (x[i + 2] + 2 * coalesce(TRY_CAST(concrete[5] AS BIGINT[])[i], 0)
         - coalesce(TRY_CAST(concrete[6] AS BIGINT[])[i], 1) * (w[i + 2] - 1) - 1)
        // coalesce(TRY_CAST(concrete[4] AS BIGINT[])[i], 1) + 1);


-- op_perf_ops(run): each modelled op (see the top of the file) with its FLOPs and bytes.
-- Columns: op_no (a key), rank, tid, name, category ('GEMM' | 'CONV' | 'SDPA' | 'NORM' | 'ELEMENTWISE'),
--   start_ns, end_ns, shape (the inputs' dims, as recorded), dtype (dtype_label of the first input), flops, bytes
CREATE OR REPLACE MACRO op_perf_ops(run) AS TABLE
WITH ops AS MATERIALIZED (
    SELECT hash(rank, coalesce(tid, ''), ts_ns, name) AS op_no, rank, coalesce(tid, '') AS tid, name, ts_ns AS start_ns,
           ts_ns + dur_ns AS end_ns,
           TRY_CAST(json_extract(args, '$."Input Dims"') AS BIGINT[][]) AS dims,
           TRY_CAST(json_extract(args, '$."Input type"') AS VARCHAR[]) AS types,
           TRY_CAST(json_extract(args, '$."Concrete Inputs"') AS VARCHAR[]) AS concrete,
           CASE WHEN name IN ('aten::addmm', 'aten::mm', 'aten::bmm', 'aten::baddbmm', 'aten::_scaled_mm') THEN 'GEMM'
                WHEN name = 'aten::convolution' THEN 'CONV'
                WHEN name IN ('aten::_scaled_dot_product_flash_attention', 'aten::_scaled_dot_product_efficient_attention',
                              'aten::_scaled_dot_product_cudnn_attention') THEN 'SDPA'
                WHEN name IN ('aten::native_layer_norm', 'aten::native_batch_norm', 'aten::native_group_norm') THEN 'NORM'
                ELSE 'ELEMENTWISE' END AS category
    FROM events
    WHERE run_id = run AND kind = 'cpu_op' AND dur_ns IS NOT NULL
      AND name IN ('aten::addmm', 'aten::mm', 'aten::bmm', 'aten::baddbmm', 'aten::_scaled_mm', 'aten::convolution',
                   'aten::_scaled_dot_product_flash_attention', 'aten::_scaled_dot_product_efficient_attention',
                   'aten::_scaled_dot_product_cudnn_attention', 'aten::native_layer_norm', 'aten::native_batch_norm',
                   'aten::native_group_norm', 'aten::add', 'aten::add_', 'aten::sub', 'aten::sub_', 'aten::mul', 'aten::mul_',
                   'aten::div', 'aten::div_', 'aten::gelu', 'aten::gelu_', 'aten::silu', 'aten::silu_', 'aten::relu',
                   'aten::relu_', 'aten::tanh', 'aten::tanh_', 'aten::sigmoid', 'aten::sigmoid_')
      AND json_extract(args, '$."Input Dims"') IS NOT NULL
), shaped AS (
    SELECT *, dtype_bytes(types[1]) AS e,
           -- GEMM operands: A [b,M,K] and B [b,K,N] (addmm/baddbmm: after the bias)
           CASE WHEN name IN ('aten::addmm', 'aten::baddbmm') THEN dims[2] ELSE dims[1] END AS a,
           CASE WHEN name IN ('aten::addmm', 'aten::baddbmm') THEN dims[3] ELSE dims[2] END AS b
    FROM ops
), modelled AS (
    SELECT *,
        CASE category
            WHEN 'GEMM' THEN
                CASE WHEN len(a) = 2 AND len(b) = 2 THEN 2.0 * a[1] * b[2] * a[2]
                          + CASE WHEN name = 'aten::addmm' THEN a[1] * b[2] ELSE 0 END
                     WHEN len(a) = 3 AND len(b) = 3 THEN 2.0 * a[1] * a[2] * b[3] * a[3]
                          + CASE WHEN name = 'aten::baddbmm' THEN a[1] * a[2] * b[3] ELSE 0 END END
            WHEN 'CONV' THEN
                CASE WHEN len(dims[1]) BETWEEN 3 AND 5 AND len(dims[2]) = len(dims[1])
                          AND coalesce(lower(concrete[7]), 'false') IN ('false', '0', '')
                     THEN 2.0 * dims[1][1] * dims[2][1] * numel(dims[2][2:]) * numel(conv_out_spatial(dims[1], dims[2], concrete)) END
            WHEN 'SDPA' THEN
                CASE WHEN len(dims[1]) = 4 AND len(dims[2]) = 4 AND len(dims[3]) = 4
                     THEN 2.0 * dims[1][1] * dims[1][2] * dims[1][3] * dims[2][3] * (dims[1][4] + dims[3][4])
                          * CASE WHEN lower(concrete[CASE WHEN name = 'aten::_scaled_dot_product_flash_attention' THEN 5 ELSE 7 END]) = 'true'
                                 THEN 0.5 ELSE 1.0 END END
            WHEN 'NORM' THEN 5.0 * numel(dims[1])
            ELSE list_max(list_transform(list_filter(list_zip(dims, types), lambda p: dtype_bytes(p[2]) IS NOT NULL),
                                         lambda p: numel(p[1]))) * 1.0
        END AS flops,
        CASE category
            WHEN 'GEMM' THEN e * (numel(a) + numel(b)
                                  + CASE WHEN len(a) = 2 THEN a[1] * b[2] ELSE a[1] * a[2] * b[3] END
                                  + CASE WHEN name IN ('aten::addmm', 'aten::baddbmm') THEN numel(dims[1]) ELSE 0 END)
            WHEN 'CONV' THEN e * (numel(dims[1]) + numel(dims[2])
                                  + dims[1][1] * dims[2][1] * numel(conv_out_spatial(dims[1], dims[2], concrete)))
            WHEN 'SDPA' THEN e * (numel(dims[1]) + numel(dims[2]) + numel(dims[3])
                                  + dims[1][1] * dims[1][2] * dims[1][3] * dims[3][4])
            WHEN 'NORM' THEN e * (2 * numel(dims[1])) + coalesce(e * (numel(dims[2]) + numel(dims[3])), 0)
                             * CASE WHEN name = 'aten::native_layer_norm' THEN 0 ELSE 1 END
                             + CASE WHEN name = 'aten::native_layer_norm' THEN coalesce(e * (numel(dims[3]) + numel(dims[4])), 0) ELSE 0 END
            ELSE list_sum(list_transform(list_filter(list_zip(dims, types), lambda p: dtype_bytes(p[2]) IS NOT NULL),
                                         lambda p: numel(p[1]) * dtype_bytes(p[2])))
                 + e * list_max(list_transform(list_filter(list_zip(dims, types), lambda p: dtype_bytes(p[2]) IS NOT NULL),
                                               lambda p: numel(p[1])))
        END AS bytes
    FROM shaped
)
SELECT op_no, rank, tid, name, category, start_ns, end_ns,
       list_filter(dims, lambda d: len(d) > 0)::VARCHAR AS shape, dtype_label(types[1]) AS dtype, flops, bytes
FROM modelled
WHERE flops IS NOT NULL AND bytes IS NOT NULL;


-- op_perf_launches(run): the GPU work (kernels, copies, sets) each modelled op launched: every
-- runtime/driver call on the op's thread while it ran (the latest modelled op started before the
-- call, ASOF, and the modelled op around that one), joined to its GPU activity by correlation (a
-- graph launch: every kernel it replays).
-- Columns: op_no, gpu_kind, gpu_name, gpu_dur_ns
CREATE OR REPLACE MACRO op_perf_launches(run) AS TABLE
WITH ops AS (
    SELECT op_no, rank, tid, start_ns, end_ns FROM op_perf_ops(run)
), calls AS (
    SELECT rank, coalesce(tid, '') AS tid, ts_ns, correlation FROM events
    WHERE run_id = run AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL AND ts_ns IS NOT NULL
), innermost AS (
    SELECT o.op_no, c.rank, c.correlation
    FROM calls c ASOF JOIN ops o ON c.rank = o.rank AND c.tid = o.tid AND c.ts_ns >= o.start_ns
    WHERE c.ts_ns < o.end_ns
), enclosing AS (
    -- a modelled op inside another (the bias add inside a convolution): its work is the outer's too.
    -- The enclosing op is the modelled op started last before it (ASOF; one level of nesting)
    SELECT i.op_no AS inner_no, o.op_no AS outer_no
    FROM ops i ASOF JOIN ops o ON o.rank = i.rank AND o.tid = i.tid AND o.start_ns < i.start_ns
    WHERE o.end_ns >= i.end_ns
), inside AS (
    SELECT op_no, rank, correlation FROM innermost
    UNION ALL
    SELECT e.outer_no, i.rank, i.correlation FROM innermost i JOIN enclosing e ON e.inner_no = i.op_no
)
SELECT i.op_no, g.kind AS gpu_kind, g.name AS gpu_name, g.dur_ns AS gpu_dur_ns
FROM inside i JOIN events g ON g.rank = i.rank AND g.correlation = i.correlation
WHERE g.run_id = run AND g.kind IN ('kernel', 'memcpy', 'memset') AND g.dur_ns IS NOT NULL;


-- op_perf_instances(run): op_perf_ops with the GPU time of the work each launched (ops that
-- launched none left out).
-- Columns: op_perf_ops' columns, gpu_ns, kernels (how many kernels)
CREATE OR REPLACE MACRO op_perf_instances(run) AS TABLE
WITH launched AS (
    SELECT op_no, sum(gpu_dur_ns) AS gpu_ns, count(*) FILTER (WHERE gpu_kind = 'kernel') AS kernels
    FROM op_perf_launches(run) GROUP BY op_no
)
SELECT o.*, l.gpu_ns, l.kernels
FROM op_perf_ops(run) o JOIN launched l ON l.op_no = o.op_no
WHERE l.gpu_ns > 0;


-- op_perf(run): the per-op performance table, one row per op name and input shapes (TraceLens'
-- grouping), over the whole run.
-- Columns: name, category, shape, dtype, calls, gflops (per call), mb (MiB moved per call, as
--   TraceLens' "Data Moved (MB)"), gpu_ms (total), mean_us (GPU time per call), tflops (achieved:
--   FLOPs / GPU time), tbps (bytes / GPU time), flops_per_byte, gpu, peak_tflops (of its dtype on
--   tensor/matrix cores for GEMM, CONV, SDPA; the vector FP32 peak for FP32), peak_tbps,
--   pct_peak_flops, pct_peak_bw, bound ('compute' | 'memory': which roof is lower at its
--   intensity), roofline_ms (total time at the roof), lost_ms (GPU time above it)
CREATE OR REPLACE MACRO op_perf(run) AS TABLE
WITH grouped AS (
    SELECT name, category, shape, any_value(dtype) AS dtype, count(*) AS calls, sum(flops) AS flops, sum(bytes) AS bytes,
           sum(gpu_ns) AS gpu_ns
    FROM op_perf_instances(run) GROUP BY name, category, shape
), peak AS (
    SELECT * FROM run_gpu_peak(run)
), rated AS (
    SELECT g.*, p.gpu, p.hbm_tbps AS peak_tbps,
           CASE WHEN g.category IN ('GEMM', 'CONV', 'SDPA') THEN
                    CASE g.dtype WHEN 'bf16' THEN p.bf16_tflops WHEN 'fp16' THEN p.bf16_tflops WHEN 'fp8' THEN p.fp8_tflops
                                 WHEN 'fp4' THEN p.fp4_tflops WHEN 'fp32' THEN p.fp32_tflops END
                ELSE CASE WHEN g.dtype IN ('bf16', 'fp16', 'fp32') THEN p.fp32_tflops END END AS peak_tflops
    FROM grouped g LEFT JOIN peak p ON TRUE
)
SELECT name, category, shape, dtype, calls, flops / calls / 1e9 AS gflops, bytes / calls / (1024.0 * 1024.0) AS mb,
       gpu_ns / 1e6 AS gpu_ms, gpu_ns / calls / 1e3 AS mean_us,
       flops / gpu_ns / 1e3 AS tflops, bytes / gpu_ns / 1e3 AS tbps, flops / nullif(bytes, 0) AS flops_per_byte,
       gpu, peak_tflops, peak_tbps,
       100.0 * (flops / gpu_ns / 1e3) / peak_tflops AS pct_peak_flops,
       100.0 * (bytes / gpu_ns / 1e3) / peak_tbps AS pct_peak_bw,
       CASE WHEN peak_tflops IS NULL OR peak_tbps IS NULL THEN NULL
            WHEN flops / peak_tflops >= bytes / peak_tbps THEN 'compute' ELSE 'memory' END AS bound,
       greatest(flops / (peak_tflops * 1e12), bytes / (peak_tbps * 1e12)) * 1e3 AS roofline_ms,
       greatest(gpu_ns / 1e6 - greatest(flops / (peak_tflops * 1e12), bytes / (peak_tbps * 1e12)) * 1e3, 0) AS lost_ms
FROM rated;


-- kernel_perf(run): per kernel name, the FLOPs and bytes of the modelled ops that launched it (each
-- op's split over the GPU work it launched in proportion to time), over that work's time: the
-- kernel's achieved TFLOP/s and TB/s, and its mean occupancy figures where Kineto recorded them
-- (args "est. achieved occupancy %", "blocks per SM", "warps per SM", "registers per thread",
-- "shared memory"; CUDA traces, not ROCm's).
-- Columns: name, modelled_ns (its time under modelled ops), tflops, tbps, occupancy_pct,
--   blocks_per_sm, warps_per_sm, registers_per_thread, shared_memory_bytes
CREATE OR REPLACE MACRO kernel_perf(run) AS TABLE
WITH pairs AS MATERIALIZED (
    SELECT *, sum(gpu_dur_ns) OVER (PARTITION BY op_no) AS op_gpu_ns FROM op_perf_launches(run)
), attributed AS (
    SELECT p.gpu_name AS name, sum(p.gpu_dur_ns) AS modelled_ns,
           sum(o.flops * p.gpu_dur_ns / p.op_gpu_ns) AS flops, sum(o.bytes * p.gpu_dur_ns / p.op_gpu_ns) AS bytes
    FROM pairs p JOIN op_perf_ops(run) o ON o.op_no = p.op_no
    WHERE p.gpu_kind = 'kernel' AND p.op_gpu_ns > 0
    GROUP BY p.gpu_name
), occupancy AS (
    SELECT name, avg(TRY_CAST(args->>'est. achieved occupancy %' AS DOUBLE)) AS occupancy_pct,
           avg(TRY_CAST(args->>'blocks per SM' AS DOUBLE)) AS blocks_per_sm,
           avg(TRY_CAST(args->>'warps per SM' AS DOUBLE)) AS warps_per_sm,
           avg(TRY_CAST(args->>'registers per thread' AS DOUBLE)) AS registers_per_thread,
           avg(TRY_CAST(args->>'shared memory' AS DOUBLE)) AS shared_memory_bytes
    FROM events WHERE run_id = run AND kind = 'kernel' GROUP BY name
)
SELECT coalesce(a.name, o.name) AS name, a.modelled_ns, a.flops / a.modelled_ns / 1e3 AS tflops,
       a.bytes / a.modelled_ns / 1e3 AS tbps, o.occupancy_pct, o.blocks_per_sm, o.warps_per_sm,
       o.registers_per_thread, o.shared_memory_bytes
FROM occupancy o FULL JOIN attributed a ON a.name = o.name;
