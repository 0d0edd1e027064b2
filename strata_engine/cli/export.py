"""`strata-engine export`: the model as a GGUF file llama.cpp serves (model/gguf_export.py, docs/ENGINES.md)."""

from __future__ import annotations

import click


@click.command()
@click.option("--gguf", "out", type=click.Path(dir_okay=False), required=True, help="The GGUF file to write.")
@click.option("--model", default="strata-tiny-moe", show_default=True, help="Model name or directory to export.")
@click.option(
    "--dtype",
    type=click.Choice(["f32", "f16"]),
    default="f32",
    show_default=True,
    help="Tensor type of the matrices (f32: the checkpoint's f16 values widened exactly; f16: as stored, "
    "half the file; norms stay f32 either way).",
)
def export(out: str, model: str, dtype: str) -> None:
    """Write MODEL as a GGUF file that llama.cpp serves with our greedy tokens (docs/ENGINES.md)."""
    from ..model.gguf_export import ExportError, export_gguf

    try:
        path = export_gguf(model, out, dtype)
    except ModuleNotFoundError as err:
        raise click.ClickException(f"{err}: the gguf package comes with llama.cpp (bash scripts/install_llama_cpp.sh)")
    except ExportError as err:
        raise click.ClickException(str(err)) from None
    from ..model.model_dir import read_config, resolve_model_path

    window = read_config(resolve_model_path(model)).sliding_window
    if window:
        click.echo(
            f"note: llama.cpp's qwen3moe applies no sliding window; its answers equal ours while prompt and "
            f"output stay within {window} tokens",
            err=True,
        )
    click.echo(path)
