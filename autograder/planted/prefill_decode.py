"""Chapter 1's planted mistakes: the roofline, the critical batch size, static batching, weight memory."""

from autograder.planted import Planted

PLANTED = {
    "roofline_sum": Planted(
        "roofline_step_time",
        "def roofline_step_time(flops, n_bytes, peak_flops, bandwidth):\n"
        "    return flops / peak_flops + n_bytes / bandwidth\n",
        {"roofline_step_time.memory_bound", "roofline_step_time.compute_bound"},
        "added the two times",
    ),
    "critical_no_half": Planted(
        "critical_batch_size",
        "def critical_batch_size(peak_flops, bandwidth, bytes_per_param):\n"
        "    return peak_flops / bandwidth * bytes_per_param\n",
        {"critical_batch_size.a100_bf16"},
        "division by 2 is missing",
    ),
    "static_mean": Planted(
        "static_batch_throughput",
        "def static_batch_throughput(output_lengths, batch_size, step_seconds):\n"
        "    chunks = [output_lengths[i:i + batch_size] for i in range(0, len(output_lengths), batch_size)]\n"
        "    return sum(output_lengths) / (sum(sum(c) / len(c) for c in chunks) * step_seconds)\n",
        {"static_batch_throughput.example", "static_batch_throughput.random"},
        "mean length",
    ),
    "memory_in_bits": Planted(
        "weight_memory_gb",
        "def weight_memory_gb(params, bits):\n    return params * bits / 1e9\n",
        {"weight_memory_gb.70b", "weight_memory_gb.other"},
        "divided by 8",
    ),
}
