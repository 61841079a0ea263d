"""Extracts README.md's JAX quick start as pasted: the first ```python block under "## Using it from Python and JAX"
into OUT_DIR/train.py, and the first ```sh block after it into OUT_DIR/quickstart.sh.
    Usage: readme_quickstart.py README.md OUT_DIR"""

import os
import re
import sys

SECTION = "## Using it from Python and JAX"


def block(text, language, start):
    """(body, end) of the first ```language block at or after `start`."""
    found = re.compile(rf"^```{language}\n(.*?)^```$", re.S | re.M).search(text, start)
    if not found:
        sys.exit(f"readme_quickstart.py: no ```{language} block after the quick start's start in README.md")
    return found.group(1), found.end()


def main(readme, out_dir):
    text = open(readme, encoding="utf-8").read()
    section_start = text.find(f"\n{SECTION}\n")
    if section_start < 0:
        sys.exit(f"readme_quickstart.py: {readme} has no section '{SECTION}'")
    section_end = text.find("\n## ", section_start + 1)
    section = text[section_start:section_end if section_end >= 0 else len(text)]
    program, program_end = block(section, "python", 0)
    commands, _ = block(section, "sh", program_end)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "train.py"), "w", encoding="utf-8") as f:
        f.write(program)
    with open(os.path.join(out_dir, "quickstart.sh"), "w", encoding="utf-8") as f:
        f.write(commands)


if __name__ == "__main__":
    main(*sys.argv[1:])
