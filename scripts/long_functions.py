#!/usr/bin/env python3
"""List Rust functions longer than a limit: lines from the `fn` line to the closing brace
at the same indent (inclusive). Usage: long_fns.py LIMIT DIR..."""
import os, re, sys

FN = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')

def scan(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    # enclosing impl/mod names for context
    out = []
    for i, l in enumerate(lines):
        m = FN.match(l)
        if not m:
            continue
        indent, name = m.group(1), m.group(2)
        # find the end: a line that is exactly indent + '}' (possibly followed by comment)
        # unless the signature ends with ';' (trait decl) or the body closes on the fn line(s)
        end = None
        for j in range(i, len(lines)):
            s = lines[j]
            if j > i and FN.match(s) and len(FN.match(s).group(1)) <= len(indent):
                break  # declaration without body
            if s.rstrip().endswith(';') and '{' not in ''.join(lines[i:j + 1]):
                break
            if s.startswith(indent + '}') and (len(s) == len(indent) + 1 or not s[len(indent) + 1].isalnum()):
                end = j
                break
            if j == i and s.rstrip().endswith('}') and s.count('{') == s.count('}') and '{' in s:
                end = j
                break
        if end is None:
            continue
        out.append((end - i + 1, name, i + 1))
    return out

def main():
    limit = int(sys.argv[1])
    rows = []
    for d in sys.argv[2:]:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith('.rs'):
                    p = os.path.join(root, f)
                    for n, name, line in scan(p):
                        if n > limit:
                            rows.append((n, name, f"{p}:{line}"))
    for n, name, loc in sorted(rows, reverse=True):
        print(f"{n:5}  {name:40} {loc}")

main()
