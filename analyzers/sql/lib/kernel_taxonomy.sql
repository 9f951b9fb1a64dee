-- requires:
-- What a GPU kernel is, from its name alone: the one definition every page, analysis and report
-- reads (gpu_activity's category, the tensor-core columns, Compare by kernel family).
--
-- | rule (name ...)                                   | family      | matrix unit | source |
-- | ------------------------------------------------- | ----------- | ----------- | ------ |
-- | ^nccl.*Kernel (ncclKernel_*, ncclDevKernel_*)      | comm        |             | NCCL/RCCL; HTA's temporal breakdown rule |
-- | ^msccl (mscclKernel_*), mscclpp                   | comm        |             | RCCL's MSCCL executor, MSCCL++ (microsoft/mscclpp) |
-- | multimem_*, one_shot_/two_shot_all_reduce          | comm        |             | torch symmetric memory (torch/csrc/distributed/c10d/symm_mem/*.cu) |
-- | cross_device_reduce_*                              | comm        |             | vLLM custom all-reduce (csrc/custom_all_reduce.cuh) |
-- | all_reduce/allgather/reduce_scatter/all_to_all     | comm        |             | TRT-LLM, HCCL-style and other collective libraries |
-- | ^sm(90|100|103|120)a?_ ... gemm/xmma/mma           | gemm        | yes         | cuBLAS/CUTLASS Hopper, Blackwell kernels (sm90_xmma_gemm_*) |
-- | ^nvjet                                            | gemm        | yes         | cuBLAS 12.x JIT GEMMs for Hopper/Blackwell (nvjet_tst_*) |
-- | e4m3, e5m2, e2m1, mxf8, mxf4, nvfp4 + gemm/bmm/mma | gemm        | yes         | FP8/FP4 GEMMs (TRT-LLM/FlashInfer bmm_E4m3_*, CUTLASS) |
-- | ^Cijk_ with _MI<m>x<n>x<k>                         | gemm        | yes (MFMA)  | hipBLASLt/Tensile: MI = the MatrixInstruction the kernel issues |
-- | ^Cijk_ without MI                                  | gemm        | no          | Tensile on vector ALUs |
-- | xdl (ck device ops), ck_tile gemm/fmha, mfma       | gemm/attn   | yes (MFMA)  | Composable Kernel: XDL = MFMA instructions |
-- | igemm_*_gtcx*, xdlops                              | conv        | yes (MFMA)  | MIOpen implicit-GEMM (gtc = GEMM tensor core, x = xdlops) |
-- | flash, fmha, attn_fwd/attn_bwd                     | attention   | yes         | FlashAttention, xFormers, AMD's Triton flash attention |
-- | triton_tem_* (mm)                                  | gemm        | yes         | Inductor GEMM templates |
-- | triton_poi_*, triton_red_*, triton_per_*            | elementwise / reduce | no | Inductor pointwise / reduction kernels |
-- | other Triton or unknown names                      | other       | unknown     | a name that says nothing is not guessed |
-- | sgemm, scudnn, _simt_, f32f32_f32f32_f32           | gemm/conv   | no (FP32)   | is_fp32_simt_matmul (the fp32_matmul finding) |
-- | conv, fprop, dgrad, wgrad, implicit_gemm           | conv        | by the rest | cuDNN / CUTLASS / MIOpen |
-- | layer_norm, batch_norm, group_norm, rms, softmax   | norm        | no          | ATen, Apex, Inductor |
-- | elementwise, Functor, fill, copy                   | elementwise | no          | ATen |
-- | reduce_kernel, reduce                              | reduce      | no          | ATen |
-- | Memcpy*, Memset*, dma*, transpose, nchwToNhwc       | memory      | no          | CUPTI copies/sets; layout changes |
-- Data type (kernel_dtype): fp4 (e2m1, nvfp4, mxf4), fp8 (e4m3, e5m2, mxf8, fp8), Tensile's type
-- token after Cijk_A..._B..._ (S fp32, D fp64, H fp16, B bf16, X xf32, F8/B8 fp8, I8 int8), else
-- bf16 / fp16 / tf32 / int8 / fp32 where the name spells it; NULL where it does not.


-- is_fp32_simt_matmul(name): an FP32 GEMM or convolution kernel on CUDA cores (cuBLAS sgemm, cuDNN
-- scudnn, CUTLASS _simt_, xmma FP32 math f32f32_f32f32_f32; f32f32_tf32f32_f32 is TF32), tensor-core
-- names excluded: the classification analyses/fp32_matmul (fp32_matmul_kernels) and the kernel
-- view use. Cheap tests first, then the exclusions (tensor-core kernels whose names also say gemm).
-- Such a kernel could run on tensor cores (TF32, FP16/BF16) and does not.
CREATE OR REPLACE MACRO is_fp32_simt_matmul(name) AS
    (contains(name, 'sgemm') OR contains(name, 'scudnn') OR contains(name, '_simt_')
     OR contains(name, 'f32f32_f32f32_f32'))
    AND NOT regexp_matches(lower(name), '(tensorop|tf32|hmma|wmma|bf16|f16|fp16|half|1688|16816|884)');


-- is_tf32_kernel(name): BOOLEAN, a kernel running FP32 data on TF32 tensor cores (CUTLASS/xmma
-- names spell 'tf32', e.g. sm80_xmma_gemm_f32f32_tf32f32_f32; cuBLAS's TF32 tensor ops are
-- tensorop_s1688 / tensorop_s16816). The one TF32 rule: kernel_dtype, is_tensor_core_kernel and
-- the fp32_matmul finding's "TF32 is already on" read it.
CREATE OR REPLACE MACRO is_tf32_kernel(name) AS
    contains(name, 'tf32') OR regexp_matches(name, 'tensorop_s(1688|16816)');


-- is_comm_kernel(name): a communication kernel (the comm rows of the table above). HTA's rule
-- ('^nccl.*Kernel') first; the other libraries' names after it. starts_with/contains first: cheap
-- tests that reject every other kernel before a regex.
CREATE OR REPLACE MACRO is_comm_kernel(name) AS
    (starts_with(name, 'nccl') AND regexp_matches(name, '^nccl.*Kernel'))
    OR starts_with(name, 'msccl') OR contains(name, 'mscclpp')
    OR contains(name, 'multimem_') OR contains(name, 'cross_device_reduce')
    OR regexp_matches(name, '(?i)(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)');


-- comm_collective_from_name(name): the collective a communication kernel's name says, lower case
-- without separators ('allreduce', 'allgather', 'reducescatter', 'alltoall', 'sendrecv', ...);
-- NULL when it says none (ncclDevKernel_Generic).
CREATE OR REPLACE MACRO comm_collective_from_name(name) AS
    nullif(lower(replace(coalesce(
        nullif(nullif(regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1), ''), 'Generic'),
        nullif(regexp_extract(name, '(?i)(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)', 1), ''),
        ''), '_', '')), '');


-- tensile_dtype_token(name): hipBLASLt/Tensile's data-type token, e.g. 'BBS' in
-- Cijk_Alik_Bljk_BBS_BH_..., 'B' in Cijk_Alik_Bljk_B_BS_..., 'SB' (S, batched); '' otherwise.
CREATE OR REPLACE MACRO tensile_dtype_token(name) AS
    CASE WHEN starts_with(name, 'Cijk_') THEN regexp_extract(name, '^Cijk_A[a-z]+_B[a-z]+_([A-Z0-9a-z]+)_', 1) ELSE '' END;


-- kernel_dtype(name): the data type the kernel's name spells (table above), or NULL.
CREATE OR REPLACE MACRO kernel_dtype(name) AS
    CASE WHEN regexp_matches(name, '(?i)(e2m1|nvfp4|mxf4|fp4)') THEN 'fp4'
         WHEN regexp_matches(name, '(?i)(e4m3|e5m2|mxf8|fp8|f8f6f4)') THEN 'fp8'
         WHEN tensile_dtype_token(name) <> '' THEN
              CASE WHEN regexp_matches(tensile_dtype_token(name), '^(F8|B8)') THEN 'fp8'
                   WHEN starts_with(tensile_dtype_token(name), 'I8') THEN 'int8'
                   WHEN starts_with(tensile_dtype_token(name), 'X') THEN 'xf32'
                   WHEN starts_with(tensile_dtype_token(name), 'S') THEN 'fp32'
                   WHEN starts_with(tensile_dtype_token(name), 'D') THEN 'fp64'
                   WHEN starts_with(tensile_dtype_token(name), 'H') THEN 'fp16'
                   WHEN starts_with(tensile_dtype_token(name), 'B') THEN 'bf16' END
         WHEN regexp_matches(name, '(?i)(bf16|bfloat16)') THEN 'bf16'
         WHEN is_tf32_kernel(name) THEN 'tf32'
         WHEN regexp_matches(name, '(?i)(fp16|f16|half|h1688|h884|h16816)') THEN 'fp16'
         WHEN regexp_matches(name, '(i8816|imma|int8)') THEN 'int8'
         WHEN is_fp32_simt_matmul(name) OR regexp_matches(name, '<float[,>]') THEN 'fp32' END;


-- is_matrix_core_name(name): the rows of the table marked "yes": the kernel's name says it issues
-- tensor-core (NVIDIA) or matrix-core (AMD MFMA) instructions.
CREATE OR REPLACE MACRO is_matrix_core_name(name) AS
    (regexp_matches(name, '^sm(90|100|101|103|110|120|121)a?_') AND regexp_matches(name, '(gemm|xmma|mma|conv|fprop|dgrad|wgrad)'))
    OR starts_with(name, 'nvjet')
    OR (regexp_matches(name, '(?i)(e4m3|e5m2|e2m1|mxf8|mxf4|nvfp4)') AND regexp_matches(name, '(?i)(gemm|bmm|mma|matmul|fmha|attention)'))
    OR (starts_with(name, 'Cijk_') AND regexp_matches(name, '_MI\d+x\d+x\d+'))
    OR contains(name, 'xdl') OR contains(name, 'mfma')
    OR (contains(name, 'ck_tile') AND regexp_matches(name, '(?i)(gemm|fmha)'))
    OR regexp_matches(name, '_gtcx')
    OR regexp_matches(name, '(^|[^a-z])attn_(fwd|bwd)')
    OR (starts_with(name, 'triton_tem_') AND regexp_matches(name, '(mm|bmm|addmm|conv)'));


-- kernel_family(name): comm | gemm | attention | conv | norm | elementwise | reduce | memory |
-- other (the table above; first match wins, in this order). Compare lines two runs up by it when
-- their kernels' names differ (another GPU vendor, another library version).
CREATE OR REPLACE MACRO kernel_family(name) AS
    CASE WHEN is_comm_kernel(name) THEN 'comm'
         WHEN starts_with(name, 'Memcpy') OR starts_with(name, 'Memset') OR starts_with(name, 'dma')
              OR regexp_matches(name, '(?i)(transpose|nchwtonhwc|nhwctonchw|CatArrayBatchedCopy|copy_kernel)') THEN 'memory'
         WHEN regexp_matches(name, '(?i)(flash|fmha|attn_fwd|attn_bwd|attention|mha_fwd|mha_bwd)') THEN 'attention'
         WHEN regexp_matches(name, '(?i)(conv|fprop|dgrad|wgrad|igemm_fwd|igemm_bwd|igemm_wrw|implicit_gemm)') THEN 'conv'
         WHEN starts_with(name, 'Cijk_') OR starts_with(name, 'nvjet')
              OR regexp_matches(name, '(?i)(gemm|xmma|bmm_|matmul|gemv|_mm_|triton_tem_)') THEN 'gemm'
         WHEN regexp_matches(name, '(?i)(layer_?norm|batch_?norm|group_?norm|rms_?norm|softmax|instance_?norm|MIOpenBatchNorm|RowwiseMoments)') THEN 'norm'
         WHEN regexp_matches(name, '(?i)(reduce_kernel|triton_red_|triton_per_|reduction)') THEN 'reduce'
         WHEN regexp_matches(name, '(?i)(elementwise|Functor|fill|triton_poi_|unrolled_|index_?select|indexSelect|scatter|gather)') THEN 'elementwise'
         ELSE 'other' END;


-- is_tensor_core_kernel(name, patterns): a kernel whose name says it runs on tensor / matrix cores:
-- it contains one of `patterns` (thresholds.TENSOR_CORE_KERNEL_PATTERNS, passed by the caller: the
-- TensorBoard plugin's list and its successors), is_tf32_kernel or is_matrix_core_name says so, and
-- it is not an FP32 CUDA-core matmul (xmma names say 'xmma_gemm' also for FP32 math).
CREATE OR REPLACE MACRO is_tensor_core_kernel(name, patterns) AS
    (list_bool_or(list_transform(patterns, lambda p: contains(name, p))) OR is_tf32_kernel(name)
     OR is_matrix_core_name(name))
    AND NOT is_fp32_simt_matmul(name);
