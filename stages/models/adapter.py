"""Publishing a LoRA adapter so that PEFT's own auto class loads it from any working directory.

PEFT writes `adapter_config.json` with the base model's path as the trainer saw it (often relative to the
project, e.g. `models/tiny/qwen25vl`) and the task type of the `LoraConfig` (`CAUSAL_LM`). With those,
`AutoPeftModelForCausalLM` asks transformers' `AutoModelForCausalLM` for a Qwen2.5-VL, which it does not map,
and any loader started outside the project looks for the base in the wrong folder. `publish_adapter` rewrites
the config the way the verl engine's adapter is published (docs/grpo_verl.md): the base path absolute, no task
type, and PEFT's `auto_mapping` naming the base class, so `peft.AutoPeftModel.from_pretrained(adapter_dir)` builds
the right model wherever it runs. The weights are untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def publish_adapter(adapter_dir: Path, base_model: str | Path, model_class: type,
                    target_rule: list[str] | str | None = None) -> dict[str, Any]:
    """Rewrite `adapter_dir/adapter_config.json` for `peft.AutoPeftModel.from_pretrained(adapter_dir)`.

    Args:
        adapter_dir: a saved PEFT adapter.
        base_model: what it applies to: a local folder (written absolute) or a hub id (kept as is).
        model_class: the base's transformers class (named in PEFT's `auto_mapping`).
        target_rule: the LoRA target rule it trained with, when the saved one is not it (verl's merger lists names).

    Returns:
        The config written.

    Raises:
        FileNotFoundError: `adapter_dir` holds no adapter_config.json.
    """
    path = Path(adapter_dir) / "adapter_config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no adapter config (not a saved PEFT adapter)")
    config = json.loads(path.read_text())
    local = Path(base_model).expanduser()
    config["base_model_name_or_path"] = str(local.resolve()) if local.exists() else str(base_model)
    config["task_type"] = None  # no causal-LM auto class for Qwen2.5-VL: the auto_mapping names the class instead
    config["auto_mapping"] = {"base_model_class": model_class.__name__, "parent_library": model_class.__module__}
    if target_rule is not None:
        config["target_modules"] = target_rule
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config
