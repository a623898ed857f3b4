"""Chapter 8's figures: a real model's decode throughput against batch, its activation outliers
per feature (with a widget over layers and the threshold), and its loss under the course's quantizers."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator

from course.plots._widgets import (
    BLUE,
    GREY,
    ORANGE,
    RED,
    Chart,
    decades,
    interactive,
    new_figure,
    plain_log_ticks,
    slider,
)


def plot_decode_batch(throughput: dict[int, float], memory_bound: float) -> Figure:
    """Measured tokens/s at each batch size, against perfect scaling and the memory roofline's
    tokens/s at batch 1 (``memory_bound``: bandwidth / bytes read per step)."""
    fig = new_figure(6.4, 3.4, left=0.12, bottom=0.16)
    ax = fig.add_subplot()
    batches = sorted(throughput)
    ax.plot(batches, [throughput[b] for b in batches], "o-", color=BLUE, label="measured")
    first = batches[0]
    ax.plot(batches, [throughput[first] * b / first for b in batches], "--", color=GREY, label="perfect scaling")
    ax.plot(
        batches,
        [memory_bound * b for b in batches],
        ":",
        color=ORANGE,
        label="memory roofline (weights read once per step)",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.set_xticks(batches)
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("tokens per second")
    ax.set_title("SmolLM2-135M decode on this machine")
    ax.legend(fontsize=8)
    return fig


class OutliersChart(Chart):
    """The largest |input| of each feature of one layer over a prompt's tokens; features at or
    over the threshold (LLM.int8()'s outliers) in red. ``absmax`` maps (layer, name) to per-feature
    maxima (a made-up example when None)."""

    def __init__(self, absmax: dict[tuple[int, str], torch.Tensor] | None = None):
        super().__init__(7.0, 3.2, left=0.12, bottom=0.17)
        self.made_up = absmax is None
        self.absmax = example_absmax() if self.made_up else absmax
        self.layers = sorted({layer for layer, _ in self.absmax})
        self.names = sorted({name for _, name in self.absmax})
        self.ax = self.figure.add_subplot()
        self.below = self.moving(self.ax.vlines([], [], [], color=BLUE, lw=1.0))
        self.over = self.moving(self.ax.vlines([], [], [], color=RED, lw=3.0, label=" "))
        self.line = self.moving(self.ax.axhline(1, color=GREY, linestyle="--", linewidth=1))
        self.ax.set_yscale("log")
        plain_log_ticks(self.ax)
        self.ax.set_xlabel("feature (input dimension of the layer)")
        self.ax.set_ylabel("largest |x| over the tokens")
        self.moving(self.ax.title)
        self.legend = self.moving(self.ax.legend(fontsize=8, loc="upper right"))

    def update(self, layer: int | None = None, name: str | None = None, threshold: float = 6.0) -> OutliersChart:
        layer = self.layers[len(self.layers) // 2] if layer is None else layer
        name = ("q_proj" if "q_proj" in self.names else self.names[0]) if name is None else name
        values = self.absmax[(layer, name)].float().cpu()
        floor = max(values.min().item(), 1e-6) / 2
        over = values >= threshold
        for lines, chosen in ((self.below, ~over), (self.over, over)):
            lines.set_segments(
                [
                    [(f, floor), (f, v)]
                    for f, v in zip(torch.nonzero(chosen).flatten().tolist(), values[chosen].tolist(), strict=True)
                ]
            )
        self.line.set_ydata([threshold, threshold])
        self.legend.get_texts()[0].set_text(f"features reaching {threshold:g}: {int(over.sum())}")
        self.ax.set_xlim(-0.5 - len(values) / 100, len(values) * 1.01)
        self.ax.set_ylim(*decades(floor, values.max().item() * 3))  # room for the legend above the bars
        self.ax.set_title(f"inputs of layer {layer}'s {name}" + (" (made-up numbers)" if self.made_up else ""))
        return self


def plot_activation_outliers(absmax: torch.Tensor, threshold: float = 6.0, title: str = "") -> Figure:
    """The largest |input| of each feature over a prompt's tokens (:class:`OutliersChart`, one layer)."""
    chart = OutliersChart({(0, "layer"): absmax}).update(0, "layer", threshold)
    chart.ax.set_title(title)
    return chart.figure


def example_absmax(layers: int = 4, features: int = 576, seed: int = 0) -> dict[tuple[int, str], torch.Tensor]:
    """Made-up per-feature maxima with a few outlier features, for the widget without a model: the
    inputs of each layer's q_proj (outliers of 12) and down_proj (outliers of 30), as in a real model."""
    from course import quantization

    return {
        (layer, name): quantization.outlier_matrix(64, features, 3, size, std=1.0, seed=seed + 2 * layer + offset)
        .abs()
        .amax(dim=0)
        for layer in range(layers)
        for offset, (name, size) in enumerate((("q_proj", 12.0), ("down_proj", 30.0)))
    }


def widget_activation_outliers(absmax: dict[tuple[int, str], torch.Tensor] | None = None) -> None:
    """Sliders over the layer and the threshold, and a choice of the layer type, over
    :class:`OutliersChart`; ``absmax`` maps (layer, name) to per-feature maxima (a made-up example when None)."""
    chart = OutliersChart(absmax)
    layers, names = chart.layers, chart.names
    interactive(
        chart,
        {
            "layer": slider(
                "IntSlider", value=layers[len(layers) // 2], min=layers[0], max=layers[-1], description="layer"
            ),
            "name": slider(
                "Dropdown", options=names, value="q_proj" if "q_proj" in names else names[0], description="linear layer"
            ),
            "threshold": slider("FloatSlider", value=6.0, min=1.0, max=20.0, step=0.5, description="threshold"),
        },
        "Activation outliers of a real model",
    )


def plot_quantized_loss(losses: dict[str, float], baseline: str) -> Figure:
    """Loss on a text for each way of storing the weights, the float32 ``baseline`` marked."""
    fig = new_figure(6.4, 3.2, left=0.3, bottom=0.17)
    ax = fig.add_subplot()
    names = list(losses)
    colours = [GREY if name == baseline else BLUE for name in names]
    ax.barh(names, [losses[n] for n in names], color=colours)
    ax.axvline(losses[baseline], color=GREY, linestyle="--", linewidth=1)
    low = min(losses.values())
    ax.set_xlim(low * 0.97, max(losses.values()) * 1.01)
    ax.invert_yaxis()
    ax.set_xlabel("loss on held-out text (nats per token)")
    ax.set_title("The course's quantizers on SmolLM2-135M's weights")
    return fig
