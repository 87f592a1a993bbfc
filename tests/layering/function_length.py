#!/usr/bin/env python3
"""No function in src/ or apps/ longer than 120 lines (docs/contributing.md, "Layers and headers").

  function_length.py SOURCE_DIR [--list N]

Scans every .cc, .cu and .h under src/ and apps/ for function definitions at namespace or class scope (member
functions, free functions, test bodies such as TEST(Suite, Case) { ... }); a lambda or a local class is part
of the function around it. A function's length runs from the first line of its head (return type, templates)
to its closing brace. Comments, string and character literals (raw strings included) and preprocessor lines
are blanked before braces are matched. Exit 0 when none is longer (allow-list aside), 1 naming each one, 2
on bad usage or a file whose braces do not balance. --list N prints every function longer than N lines.
"""
import os
import re
import sys

MAX_LINES = 120

# Functions allowed over the limit. To be kept empty, never added to: an entry that no longer names a function
# over the limit fails the check.
ALLOWED = set()

SOURCE_EXTS = (".cc", ".cu", ".h", ".cuh")
CLASS_RE = re.compile(r"^(?:\s*(?:typedef|extern|static|inline|constexpr|const|\[\[[^\]]*\]\]|alignas\s*\([^)]*\)))*"
                      r"\s*(class|struct|union|enum)\b")
NAMESPACE_RE = re.compile(r"^\s*(?:inline\s+)?namespace\b|^\s*extern\s*\"C\"")
RAW_PREFIX_RE = re.compile(r"(?:^|[^A-Za-z_0-9])(?:u8|[uUL])?R$")
ACCESS_RE = re.compile(r"^\s*(?:public|private|protected)\s*:(?!:)")
NAME_RE = re.compile(r"((?:[A-Za-z_~][A-Za-z_0-9]*\s*(?:<[^()]*>)?\s*::\s*)*"
                     r"(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_][A-Za-z_0-9]*))\s*\($")


def blank(text):
    """Comments, literals and preprocessor lines replaced by spaces; newlines kept, so offsets and lines hold."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t":
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"' and RAW_PREFIX_RE.search(text[max(0, i - 4):i]):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])
            delim = m.group(1) if m else ""
            end = text.find(")" + delim + '"', i)
            j = n if end < 0 else end + len(delim) + 2
            wipe(i, j)
            i = j
        elif c == '"' or (c == "'" and not re.search(r"\b0[xX][0-9a-fA-F']*$|\b[0-9][0-9a-fA-F']*$", text[max(0, i - 40):i])):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            wipe(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def strip_templates(head):
    """`template <...>` clauses removed (balanced angle brackets), so `class T` or `= int` there do not count."""
    while True:
        m = re.search(r"\btemplate\s*<", head)
        if not m:
            return head
        depth, j = 1, m.end()
        while j < len(head) and depth:
            depth += {"<": 1, ">": -1}.get(head[j], 0)
            j += 1
        head = head[:m.start()] + " " + head[j:]


def is_initializer(head):
    """A `=` at parenthesis depth 0 that is no comparison and no operator= : a variable's initializer."""
    depth = 0
    for k, c in enumerate(head):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "=" and depth == 0:
            before, after = head[k - 1:k], head[k + 1:k + 2]
            if before in ("=", "!", "<", ">") or after == "=":
                continue
            if re.search(r"\boperator\s*[-+*/%^&|<>!]*$", head[:k]):
                continue
            return True
    return False


def function_name(head):
    """The qualified name before the parameter list: `Planner::Impl::build`, `TEST(Suite, Case)`."""
    text = re.sub(r"\s+", " ", head.strip())
    m = re.match(r"^(TEST(?:_F|_P)?|TYPED_TEST(?:_P)?)\s*\(([^)]*)\)", text)
    if m:
        return "%s(%s)" % (m.group(1), re.sub(r"\s*,\s*", ", ", m.group(2).strip()))
    depth = 0
    for k, c in enumerate(text):  # the first '(' at angle depth 0 that follows a name
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0:
            m = NAME_RE.search(text[:k + 1])
            if m:
                return re.sub(r"\s+", "", m.group(1))
    return text[:60]


class Scanner:
    def __init__(self, rel, text):
        self.rel = rel
        self.code = blank(text)
        self.found = []  # (name, first line, last line)
        self.line_of = []
        line = 1
        for c in self.code:
            self.line_of.append(line)
            if c == "\n":
                line += 1

    def match_brace(self, i):
        depth = 0
        for j in range(i, len(self.code)):
            c = self.code[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return j
        raise ValueError("%s:%d: '{' without its '}'" % (self.rel, self.line_of[i]))

    def scan(self, start=0, end=None, in_class=False):
        """Namespace or class scope [start, end): finds the functions defined there, recursing into scopes."""
        code = self.code
        end = len(code) if end is None else end
        head_start, parens, i = start, 0, start
        while i < end:
            c = code[i]
            if c in "([":
                parens += 1
            elif c in ")]":
                parens -= 1
            elif c == ";" and parens == 0:
                head_start = i + 1
            elif c == "}":
                raise ValueError("%s:%d: '}' without its '{'" % (self.rel, self.line_of[i]))
            elif c == "{":
                close = self.match_brace(i)
                head = code[head_start:i]
                if parens == 0:
                    self.scope(head, head_start, i, close, in_class)
                i = close + 1
                if parens == 0:
                    # a member initializer `m_{x}` in a constructor's list: the head goes on to the body
                    if not (self.next_char(i) in ",{" and self.is_member_init(head)):
                        head_start = i
                continue
            i += 1
        if parens != 0:
            raise ValueError("%s: parentheses do not balance" % self.rel)

    def next_char(self, i):
        while i < len(self.code) and self.code[i].isspace():
            i += 1
        return self.code[i] if i < len(self.code) else ""

    @staticmethod
    def is_member_init(head):
        return re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?:", head) is not None or re.search(r"[,:]\s*[A-Za-z_]\w*\s*$", head) is not None

    def scope(self, head, head_start, open_, close, in_class):
        bare = ACCESS_RE.sub(" ", head)
        if NAMESPACE_RE.search(bare):
            self.scan(open_ + 1, close, in_class=False)
            return
        untemplated = strip_templates(bare)
        if CLASS_RE.search(untemplated) and "(" not in untemplated.split("{")[0].split(":")[0]:
            self.scan(open_ + 1, close, in_class=True)
            return
        if "(" not in untemplated or is_initializer(untemplated):
            return  # an initializer, an enum's values, a brace-initialised member
        if re.search(r"[A-Za-z_0-9>\]]\s*$", head) and self.next_char(close + 1) in ",{" and self.is_member_init(head):
            return  # `m_{x}` in a constructor's initializer list
        skip = len(head) - len(head.lstrip())
        first = head_start + skip
        access = ACCESS_RE.match(head)
        if access:
            tail = head[access.end():]
            first = head_start + access.end() + len(tail) - len(tail.lstrip())
        self.found.append((function_name(untemplated), self.line_of[first], self.line_of[close]))


def scan_tree(root):
    out = []
    for top in ("src", "apps"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCE_EXTS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    s = Scanner(rel, fh.read())
                s.scan()
                out += [(rel, name, a, b) for name, a, b in s.found]
    return out


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--list") or not os.path.isdir(
            os.path.join(argv[1], "src")):
        print("usage: function_length.py SOURCE_DIR [--list N]", file=sys.stderr)
        return 2
    try:
        functions = scan_tree(argv[1])
    except ValueError as e:
        print("FAIL: cannot scan: %s" % e)
        return 2
    if len(argv) == 4:
        for rel, name, a, b in sorted(functions, key=lambda f: f[2] - f[3]):
            if b - a + 1 > int(argv[3]):
                print("%5d  %s:%d  %s" % (b - a + 1, rel, a, name))
        return 0
    bad, needed = [], set()
    for rel, name, a, b in functions:
        n = b - a + 1
        if n <= MAX_LINES:
            continue
        if (rel, name) in ALLOWED:
            needed.add((rel, name))
            print("known (allow-listed): %s:%d %s is %d lines" % (rel, a, name, n))
            continue
        bad.append((rel, name, a, n))
    for rel, name, a, n in bad:
        print("FAIL: %s:%d %s is %d lines (at most %d: extract well-named helpers)" % (rel, a, name, n, MAX_LINES))
    stale = sorted(ALLOWED - needed)
    for rel, name in stale:
        print("FAIL: %s %s is allow-listed but no longer over %d lines (or gone): remove it from the list" %
              (rel, name, MAX_LINES))
    if bad or stale:
        return 1
    print("PASS: %d functions in src/ and apps/, none longer than %d lines (%d allow-listed)" %
          (len(functions), MAX_LINES, len(ALLOWED)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
