"""Pipeline stages as torch.distributed ranks: `pipeline.py` (the head's side, `Pipeline`'s interface),
`stage.py` (a stage rank's body; `strata-engine stage`), `ranks.py` (ranks started here or joined through
env://), `wire.py` (one frame per ragged micro-batch per hop). docs/DISTRIBUTED.md."""
