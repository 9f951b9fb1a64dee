-- requires: lib/intervals.sql
-- run_workload(run): whether the run trains or serves/infers, from what its trace records, with
-- the evidence counted. First rule that holds wins:
--   training    autograd ran (backward ops: *Backward0, autograd::engine::evaluate_function) or an
--               optimizer stepped (Optimizer.step#*, Optimizer.zero_grad#*, aten::_fused_adam*)
--   inference   a serving engine's code is on the Python stack (vLLM, SGLang, TensorRT-LLM, xDiT,
--               Diffusers pipelines, Hugging Face generate: their source paths in python_function
--               events), or a range is named for inference (decode, prefill, generate, inference),
--               or model ops ran forward only (matmul, convolution, attention, normalization ops
--               and no backward or optimizer op anywhere in the trace)
--   unknown     none of these (no CPU ops recorded, or no model ops)
-- Columns: workload, engine ('vllm' | 'sglang' | 'tensorrt_llm' | 'xdit' | 'diffusers' |
--   'hf_generate' | NULL), backward_ops, optimizer_ops, forward_ops, engine_frames,
--   inference_ranges (counts over the run), example_backward, example_range (names, for the evidence)
CREATE OR REPLACE MACRO run_workload(run) AS TABLE
WITH host AS (
    SELECT kind, name FROM events
    WHERE run_id = run AND kind IN ('cpu_op', 'user_annotation', 'python_function')
), counted AS (
    SELECT
        count(*) FILTER (WHERE kind = 'cpu_op' AND (regexp_matches(name, 'Backward\d*$')
                                                    OR starts_with(name, 'autograd::engine::evaluate_function'))) AS backward_ops,
        count(*) FILTER (WHERE kind IN ('cpu_op', 'user_annotation')
                           AND (starts_with(name, 'Optimizer.step') OR starts_with(name, 'Optimizer.zero_grad')
                                OR starts_with(name, 'aten::_fused_adam') OR starts_with(name, 'aten::_fused_sgd'))) AS optimizer_ops,
        count(*) FILTER (WHERE kind = 'cpu_op' AND name IN (
            'aten::linear', 'aten::addmm', 'aten::mm', 'aten::bmm', 'aten::matmul', 'aten::baddbmm', 'aten::_scaled_mm',
            'aten::convolution', 'aten::scaled_dot_product_attention', 'aten::layer_norm', 'aten::native_layer_norm',
            'aten::batch_norm', 'aten::group_norm', 'aten::rms_norm', 'aten::embedding')) AS forward_ops,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'vllm/')) AS vllm_frames,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'sglang/')) AS sglang_frames,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'tensorrt_llm/')) AS trtllm_frames,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'xfuser/')) AS xdit_frames,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'diffusers/pipelines/')) AS diffusers_frames,
        count(*) FILTER (WHERE kind = 'python_function' AND contains(name, 'transformers/generation/')) AS generate_frames,
        count(*) FILTER (WHERE kind = 'user_annotation'
                           AND regexp_matches(name, '(?i)(decode|prefill|inference|generate|serving)')) AS inference_ranges,
        min(name) FILTER (WHERE kind = 'cpu_op' AND regexp_matches(name, 'Backward\d*$')) AS example_backward,
        min(name) FILTER (WHERE kind = 'user_annotation'
                                  AND regexp_matches(name, '(?i)(decode|prefill|inference|generate|serving)')) AS example_range
    FROM host
), engine AS (
    SELECT *,
        CASE WHEN vllm_frames > 0 THEN 'vllm' WHEN sglang_frames > 0 THEN 'sglang'
             WHEN trtllm_frames > 0 THEN 'tensorrt_llm' WHEN xdit_frames > 0 THEN 'xdit'
             WHEN diffusers_frames > 0 THEN 'diffusers' WHEN generate_frames > 0 THEN 'hf_generate' END AS engine,
        greatest(vllm_frames, sglang_frames, trtllm_frames, xdit_frames, diffusers_frames, generate_frames) AS engine_frames
    FROM counted
)
SELECT CASE WHEN backward_ops > 0 OR optimizer_ops > 0 THEN 'training'
            WHEN engine IS NOT NULL OR inference_ranges > 0 OR forward_ops > 0 THEN 'inference'
            ELSE 'unknown' END AS workload,
       engine, backward_ops, optimizer_ops, forward_ops, engine_frames, inference_ranges,
       example_backward, example_range
FROM engine;
