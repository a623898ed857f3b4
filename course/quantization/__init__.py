"""Weight quantization, the code behind chapter 3, one module per concern:

- :mod:`~course.quantization.absmax`: symmetric absmax integer codes at any bit width, per tensor,
  per row or per group; int8 codes with per-row scales; the relative error; the scales' bits;
- :mod:`~course.quantization.packing`: codes packed into bytes (chapter 8's NF4 bytes, chapter 9's int4);
- :mod:`~course.quantization.nf4`: NormalFloat-4 (QLoRA);
- :mod:`~course.quantization.int8`: LLM.int8()'s split of a product into int8 and outlier features;
- :mod:`~course.quantization.gptq`: GPTQ, codes chosen column by column with calibration Hessians;
- :mod:`~course.quantization.awq`: AWQ, salient input channels scaled before rounding;
- :mod:`~course.quantization.models`: the course model quantized whole, calibrated, and measured;
- :mod:`~course.quantization.matrices`: the matrices the chapter studies;
- :mod:`~course.quantization.demos`: the chapter's demonstrations and headline numbers.

Every public name is here too (``from course import quantization``; ``quantization.quantize``).
"""

from course.quantization.absmax import (
    MAX_BITS as MAX_BITS,
)
from course.quantization.absmax import (
    MIN_BITS as MIN_BITS,
)
from course.quantization.absmax import (
    absmax_levels as absmax_levels,
)
from course.quantization.absmax import (
    check_matrix as check_matrix,
)
from course.quantization.absmax import (
    dequantize as dequantize,
)
from course.quantization.absmax import (
    dequantize_int8 as dequantize_int8,
)
from course.quantization.absmax import (
    described as described,
)
from course.quantization.absmax import (
    effective_bits as effective_bits,
)
from course.quantization.absmax import (
    effective_bits_double_quant as effective_bits_double_quant,
)
from course.quantization.absmax import (
    group_columns as group_columns,
)
from course.quantization.absmax import (
    half_step as half_step,
)
from course.quantization.absmax import (
    quantize as quantize,
)
from course.quantization.absmax import (
    quantize_dequantize as quantize_dequantize,
)
from course.quantization.absmax import (
    quantize_dequantize_per_tensor as quantize_dequantize_per_tensor,
)
from course.quantization.absmax import (
    quantize_int8 as quantize_int8,
)
from course.quantization.absmax import (
    relative_error as relative_error,
)
from course.quantization.absmax import (
    working as working,
)
from course.quantization.awq import (
    AWQ_GRID as AWQ_GRID,
)
from course.quantization.awq import (
    AWQ_SHARED_INPUTS as AWQ_SHARED_INPUTS,
)
from course.quantization.awq import (
    awq_grid as awq_grid,
)
from course.quantization.awq import (
    awq_layer_study as awq_layer_study,
)
from course.quantization.awq import (
    awq_model as awq_model,
)
from course.quantization.awq import (
    awq_quantize as awq_quantize,
)
from course.quantization.awq import (
    awq_quantize_dequantize as awq_quantize_dequantize,
)
from course.quantization.awq import (
    awq_scales as awq_scales,
)
from course.quantization.awq import (
    awq_search as awq_search,
)
from course.quantization.awq import (
    salience as salience,
)
from course.quantization.demos import (
    AWQ_STUDIED as AWQ_STUDIED,
)
from course.quantization.demos import (
    QUANTIZATION_VIEW as QUANTIZATION_VIEW,
)
from course.quantization.demos import (
    TRIED_ON as TRIED_ON,
)
from course.quantization.demos import (
    VIEW_GROUPS as VIEW_GROUPS,
)
from course.quantization.demos import (
    bits_sweep as bits_sweep,
)
from course.quantization.demos import (
    chapter_recordings as chapter_recordings,
)
from course.quantization.demos import (
    gptq_layer as gptq_layer,
)
from course.quantization.demos import (
    granularity_errors as granularity_errors,
)
from course.quantization.demos import (
    granularity_reading as granularity_reading,
)
from course.quantization.demos import (
    llm_int8_example as llm_int8_example,
)
from course.quantization.demos import (
    outlier_row_example as outlier_row_example,
)
from course.quantization.demos import (
    quantization_view as quantization_view,
)
from course.quantization.demos import (
    recorded_awq_losses as recorded_awq_losses,
)
from course.quantization.demos import (
    recorded_awq_studies as recorded_awq_studies,
)
from course.quantization.demos import (
    recorded_bits_sweep as recorded_bits_sweep,
)
from course.quantization.demos import (
    recorded_gptq_layer as recorded_gptq_layer,
)
from course.quantization.demos import (
    recorded_int8_error as recorded_int8_error,
)
from course.quantization.demos import (
    recorded_llm_int8_example as recorded_llm_int8_example,
)
from course.quantization.demos import (
    recorded_model_losses as recorded_model_losses,
)
from course.quantization.demos import (
    recorded_quantization_view as recorded_quantization_view,
)
from course.quantization.demos import (
    reference_numbers as reference_numbers,
)
from course.quantization.demos import (
    stored_gptq_losses as stored_gptq_losses,
)
from course.quantization.demos import (
    stored_granularity_errors as stored_granularity_errors,
)
from course.quantization.demos import (
    worst_half_steps as worst_half_steps,
)
from course.quantization.demos import (
    your_functions as your_functions,
)
from course.quantization.gptq import (
    gptq_quantize as gptq_quantize,
)
from course.quantization.gptq import (
    gptq_quantize_dequantize as gptq_quantize_dequantize,
)
from course.quantization.gptq import (
    hessian as hessian,
)
from course.quantization.gptq import (
    one_thread_on_cpu as one_thread_on_cpu,
)
from course.quantization.gptq import (
    output_error as output_error,
)
from course.quantization.int8 import (
    int8_matmul as int8_matmul,
)
from course.quantization.int8 import (
    int8_matmul_with_outliers as int8_matmul_with_outliers,
)
from course.quantization.matrices import (
    gaussian_matrix as gaussian_matrix,
)
from course.quantization.matrices import (
    outlier_matrix as outlier_matrix,
)
from course.quantization.matrices import (
    salient_inputs as salient_inputs,
)
from course.quantization.models import (
    AWQ_BITS as AWQ_BITS,
)
from course.quantization.models import (
    CALIBRATION_WINDOWS as CALIBRATION_WINDOWS,
)
from course.quantization.models import (
    EVAL_WINDOWS as EVAL_WINDOWS,
)
from course.quantization.models import (
    GPTQ_BITS as GPTQ_BITS,
)
from course.quantization.models import (
    LOSS_NOISE as LOSS_NOISE,
)
from course.quantization.models import (
    MODEL_SETTINGS as MODEL_SETTINGS,
)
from course.quantization.models import (
    awq_against_rtn as awq_against_rtn,
)
from course.quantization.models import (
    awq_reading as awq_reading,
)
from course.quantization.models import (
    calibrated as calibrated,
)
from course.quantization.models import (
    calibration_hessians as calibration_hessians,
)
from course.quantization.models import (
    calibration_statistics as calibration_statistics,
)
from course.quantization.models import (
    course_model_awq as course_model_awq,
)
from course.quantization.models import (
    course_model_calibrated as course_model_calibrated,
)
from course.quantization.models import (
    course_model_gptq as course_model_gptq,
)
from course.quantization.models import (
    gptq_against_rtn as gptq_against_rtn,
)
from course.quantization.models import (
    gptq_model as gptq_model,
)
from course.quantization.models import (
    gptq_reading as gptq_reading,
)
from course.quantization.models import (
    model_losses as model_losses,
)
from course.quantization.models import (
    quantize_model as quantize_model,
)
from course.quantization.nf4 import (
    NF4_OFFSET as NF4_OFFSET,
)
from course.quantization.nf4 import (
    dequantize_nf4 as dequantize_nf4,
)
from course.quantization.nf4 import (
    nf4_levels as nf4_levels,
)
from course.quantization.nf4 import (
    nf4_quantize_dequantize as nf4_quantize_dequantize,
)
from course.quantization.nf4 import (
    quantize_nf4 as quantize_nf4,
)
from course.quantization.packing import (
    pack_codes as pack_codes,
)
from course.quantization.packing import (
    pack_int4 as pack_int4,
)
from course.quantization.packing import (
    unpack_codes as unpack_codes,
)
from course.quantization.packing import (
    unpack_int4 as unpack_int4,
)
