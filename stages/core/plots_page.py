"""An offline page for `dvc plots show` / `dvc plots diff`.

DVC's default page loads Vega, Vega-Lite and Vega-Embed from a CDN, so an offline machine shows an empty
page. This page template inlines the three libraries, bundled by the `vl-convert-python` package (its
`javascript_bundle()` assigns `vegaEmbed`, `vegaLite` and `vega` to `window`, which is what DVC's plot
snippets call). The project's `.dvc/config` names it as `plots.html_template` (`tmp/plots_offline.html`,
relative to `.dvc/`); `scripts/setup.sh` writes it:

    python -m stages.core.plots_page            # writes .dvc/tmp/plots_offline.html
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PATH = Path(".dvc") / "tmp" / "plots_offline.html"

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>vrsflow plots</title>
    <script type="text/javascript">
__VEGA_BUNDLE__
    </script>
    <style>
        body { font-family: sans-serif; }
        table { border-spacing: 15px; }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def page_template() -> str:
    """The page: DVC's placeholders (`{plot_divs}`, `{refresh_tag}`) and the Vega libraries inline."""
    import vl_convert

    bundle = vl_convert.javascript_bundle()
    for placeholder in ("{plot_divs}", "{scripts}", "{refresh_tag}"):
        if placeholder in bundle:  # DVC fills placeholders by plain text replacement
            raise RuntimeError(f"the Vega bundle contains DVC's placeholder {placeholder}")
    return PAGE.replace("__VEGA_BUNDLE__", bundle.replace("</script", "<\\/script"))


def write_page_template(path: Path = DEFAULT_PATH) -> Path:
    """Write the page template to `path` (folders created); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page_template(), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m stages.core.plots_page [PATH]`."""
    parser = argparse.ArgumentParser(description="write the offline page template for dvc plots")
    parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    args = parser.parse_args(argv)
    print(f"offline dvc plots page (Vega inlined): {write_page_template(Path(args.path))}")


if __name__ == "__main__":
    main()
