#!/usr/bin/env python3
"""Checks that every library source includes only headers of its own layer and of the layers below it.

The table is the one CMake writes from cmake/library.cmake (<build>/layers.txt), a line per layer:
    <layer>: <its folders> | <every folder it may include from>
Each #include "..." in a layer's files must name a header in a visible folder, a header CMake generates for the
layer (--generated NAME), or, in the C API's folder alone, ckpt.h. The build enforces the same rule through each
layer's include root; this test names every offending line at once, and also catches what an include root cannot:
a path that climbs out with "..", or a header reached relative to the including file."""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    layers = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if not line.strip():
            continue
        name, rest = line.split(':', 1)
        own, visible = rest.split('|')
        layers[name.strip()] = (own.split(), visible.split())
    return layers


def violations(source_root, layers, generated, public_header_folders, planted=None):
    """Every include against the arrows, as a message each. `planted` (file, header) adds that include to the top of
    the file's text as read, which is how the self-test shows that a real one would be caught."""
    for name, (own, visible) in layers.items():
        for folder in own:
            for path in sorted((source_root / folder).glob('*')):
                if path.suffix not in ('.h', '.cc', '.inc'):
                    continue
                lines = path.read_text(errors='replace').splitlines()
                if planted and path.relative_to(source_root).as_posix() == planted[0]:
                    lines.insert(0, f'#include "{planted[1]}"')
                for number, line in enumerate(lines, 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    target = match.group(1)
                    where = f'{path.relative_to(source_root)}:{number}'
                    if '..' in pathlib.PurePosixPath(target).parts:
                        yield f'{where}: layer {name} includes "{target}", a path that climbs out of its folder'
                    elif target in generated:
                        continue
                    elif target == 'ckpt.h':
                        if folder not in public_header_folders:
                            yield f'{where}: layer {name} includes ckpt.h, which only the C API ({", ".join(public_header_folders)}) may'
                    elif '/' not in target:
                        yield (f'{where}: layer {name} includes "{target}" relative to the file; '
                               f'name it from the source root ("{folder}/{target}")')
                    elif not any(target.startswith(v + '/') for v in visible):
                        yield (f'{where}: layer {name} includes "{target}", which is not in its folders or in a '
                               f'layer it uses ({" ".join(visible)})')
                    elif not (source_root / target).is_file():
                        yield f'{where}: layer {name} includes "{target}", which does not exist'


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('table', help='<build>/layers.txt')
    parser.add_argument('--source-root', required=True)
    parser.add_argument('--generated', action='append', default=[], help='a generated header name (repeatable)')
    parser.add_argument('--public-header-folder', action='append', default=[],
                        help='a folder whose files may include ckpt.h (repeatable)')
    parser.add_argument('--plant', nargs=2, metavar=('FILE', 'HEADER'),
                        help='self-test: add #include "HEADER" to FILE as read; succeed only if it is reported')
    args = parser.parse_args()
    layers = read_table(args.table)
    found = list(violations(pathlib.Path(args.source_root), layers, set(args.generated), args.public_header_folder,
                            args.plant))
    for line in found:
        print(line)
    print(f'{len(found)} include(s) against the arrows in {len(layers)} layers')
    if args.plant:
        caught = any(line.startswith(f'{args.plant[0]}:1: ') for line in found)
        print('the planted include was ' + ('reported' if caught else 'NOT reported'))
        return 0 if caught else 1
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
