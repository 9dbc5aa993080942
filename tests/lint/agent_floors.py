#!/usr/bin/env python3
"""agent/'s folders depend on each other one way only (agent/README.md,
"Floors"): every `#include "agent/<folder>/..."` in agent/<folder>/ must name
the folder itself or one it may use. Prints each include that breaks the
rule and exits 1; exits 0 when none does."""
import pathlib
import re
import sys

# folder -> the folders its files may include (besides their own).
MAY_USE = {
    'cli': set(),
    'process': set(),
    'watch': {'process'},
    'torch_probe': {'cli', 'process'},
    'elastic': {'cli', 'process', 'torch_probe', 'watch'},
    'hosting': {'cli'},
    'frontends': {'cli', 'process'},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"agent/([^"]+)"', re.M)


def main():
    agent = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                         pathlib.Path(__file__).resolve().parents[2] / 'agent')
    bad = []
    for path in sorted(agent.rglob('*')):
        if path.suffix not in ('.h', '.cc'):
            continue
        rel = path.relative_to(agent)
        if len(rel.parts) == 1:
            continue  # main.cc wires everything
        folder = rel.parts[0]
        if folder not in MAY_USE:
            bad.append(f'{rel}: folder {folder}/ has no entry in MAY_USE')
            continue
        for target in INCLUDE.findall(path.read_text()):
            parts = target.split('/')
            if len(parts) < 2:
                bad.append(f'{rel}: includes agent/{target}, which is in no folder')
                continue
            if parts[0] != folder and parts[0] not in MAY_USE[folder]:
                bad.append(f'{rel}: {folder}/ includes agent/{target} '
                           f'({parts[0]}/ is not below {folder}/)')
    for line in bad:
        print(line)
    print(f'agent floors: {len(bad)} violation(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
