"""The walk: one pass over an error-free tree, collecting the facts of a `ParsedScript`."""

from __future__ import annotations

import re

from tree_sitter import Node

from sandbox.bash.syntax.checks import _SourceChecks
from sandbox.bash.syntax.grammar import (
    _A_ARITH_EXPANSION,
    _A_ASSIGNMENT,
    _A_ASSIGNMENTS,
    _A_COMMAND,
    _A_COMMAND_SUBSTITUTION,
    _A_COMPOUND,
    _A_DECLARATION,
    _A_EXPANSION,
    _A_EXPRESSION,
    _A_FILE_REDIRECT,
    _A_FUNCTION,
    _A_HEREDOC,
    _A_HERESTRING,
    _A_PROCESS_SUBSTITUTION,
    _A_QUOTING,
    _A_TEST_COMMAND,
    _A_UNKNOWN,
    _A_UNSET,
    _ARITH,
    _ARITH_TEST_OPERATORS,
    _ASSIGNMENT,
    _BLANKS,
    _C_FOR,
    _COLON,
    _COMMAND_NAME,
    _COMMENT,
    _CONTAINER,
    _DATA,
    _DISPATCH,
    _DO_GROUP,
    _DQUOTE,
    _EXPANSION,
    _EXPANSION_START,
    _EXPRESSION,
    _FILE_REDIRECT,
    _FOR_IN,
    _HEREDOC_REDIRECT,
    _HOLDS_ASSIGNMENTS,
    _KIND_COUNT,
    _KIND_NAME,
    _LEAF,
    _LITERAL,
    _NAME,
    _NAMED,
    _NUMBER,
    _ONE_LINE,
    _OPEN_BRACKET,
    _OPERATOR_CACHE,
    _OPERATOR_TOKENS,
    _PLAIN_COMMAND,
    _REDIRECTS,
    _SEPARATOR,
    _STATEMENT,
    _SUBSCRIPT,
    _TEST,
    _UNSEEN,
    _WORD,
    _heredoc_delimiter,
    _operator_for,
)
from sandbox.bash.syntax.model import (
    _WORD_TAIL,
    Assignment,
    Finding,
    Operator,
    Redirect,
    SimpleCommand,
    Word,
    _new,
)
from sandbox.bash.syntax.words import scan_word

# ---------------------------------------------------------------------------
# The walk


class _Walk(_SourceChecks):
    """One iterative pass over an error-free tree; collects the ParsedScript fields.

    Two whole-source checks ride along. Control characters (R8) are allowed
    only inside data leaves, whose ranges are collected when the source has
    any. Every "$(", "${", "$[" and backtick in the source must be accounted
    for by a node tree-sitter parsed as that expansion, an escape, or a literal
    (single-quoted) leaf; one that is not is an expansion bash will perform and
    tree-sitter did not see.
    """

    def __init__(
        self, source: str, data: bytes, max_depth: int, data_ranges: bool, literal_ranges: bool
    ) -> None:
        self.source = source
        self.data = data
        self.ascii = len(data) == len(source)
        self.max_depth = max_depth
        self.commands: list[SimpleCommand] = []
        self.operators: list[Operator] = []
        self.assignments: list[Assignment] = []
        self.functions: list[str] = []
        self.redirects: list[Redirect] = []
        self.findings: list[Finding] = []
        self.depth = 0
        self.controls = data_ranges
        # (start, end, is_data): quoted text is data, a substitution inside it is
        # code again; the innermost range around a position decides.
        self.data_ranges: list[tuple[int, int, bool]] = []
        self.expansions = [m.start() for m in _EXPANSION_START.finditer(data)]
        self.track_literals = literal_ranges or bool(self.expansions)
        self.claimed: set[int] = set()
        self.literal_ranges: list[tuple[int, int]] = []

    def text(self, node: Node) -> str:
        if self.ascii:
            return self.source[node.start_byte : node.end_byte]
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def span(self, start: int, end: int) -> str:
        if self.ascii:
            return self.source[start:end]
        return self.data[start:end].decode("utf-8", "replace")

    def find(self, rule: str, message: str, node: Node, token: str | None = None) -> None:
        self.findings.append(Finding(rule, message, token, self.offset(node.start_byte)))

    def words(self, nodes: list[Node], skip: set[int] | None = None) -> tuple[Word, ...]:
        """Words of ``nodes``; adjacent nodes with no blank between them are one
        bash word (tree-sitter splits ``$"x"`` and ``a<(b)``).

        The start offsets of the nodes of a word bash does not expand go to
        ``skip``: nothing in them needs walking. Its "$(" and backticks are
        quoted or escaped, so its span counts as literal text for
        check_expansions. (Not when the source has control characters: R8 needs
        to see which of them are inside quotes.)
        """
        out: list[Word] = []
        group: list[int] = []
        start = end = -1
        for node in nodes:
            node_start = node.start_byte
            if node_start == end:
                end = node.end_byte
                group.append(node_start)
                continue
            if start >= 0:
                out.append(self.word(start, end, group, skip))
            start, end = node_start, node.end_byte
            group = [node_start]
        if start >= 0:
            out.append(self.word(start, end, group, skip))
        return tuple(out)

    def word(self, start: int, end: int, group: list[int], skip: set[int] | None) -> Word:
        word = scan_word(self.span(start, end))
        if skip is not None and (word.plain or (word.value is not None and not self.controls)):
            skip.update(group)
            if not word.plain and self.track_literals:
                self.literal_ranges.append((start, end))
        return word

    # -- statements ------------------------------------------------------

    def plain_command(self, node: Node) -> bool:
        """Record a command of plain words only, the common case, and say so: then
        nothing inside needs a walk, and its children are never asked for (a
        64 KiB command has ~30,000 of them)."""
        start = node.start_byte
        text = self.span(start, node.end_byte)
        first = node.child(0)
        if first is None or first.kind_id not in _COMMAND_NAME or not _PLAIN_COMMAND.fullmatch(text):
            return False
        words = tuple([_new(Word, (w, w, w, True, *_WORD_TAIL)) for w in _BLANKS.split(text)])
        at = start if self.ascii else self.offset(start)
        self.commands.append(SimpleCommand("command", words, (), text, at))
        return True

    def command(self, node: Node, children: list[Node]) -> set[int]:
        """Record a simple command that is not plain_command's; return the start
        offsets of its children made of plain words, which the walk can skip."""
        start = node.start_byte
        text = self.span(start, node.end_byte)
        at = start if self.ascii else self.offset(start)
        assignments: list[Assignment] = []
        parts: list[Node] = []
        seen_name = False
        for child in children:
            kind = child.kind_id
            if kind in _COMMAND_NAME:
                seen_name = True
                parts.append(child)
            elif kind in _REDIRECTS:
                continue
            elif seen_name:
                parts.append(child)
            elif kind in _ASSIGNMENT:
                assignments.append(self.assignment(child))
        plain: set[int] = set()
        self.commands.append(
            SimpleCommand("command", self.words(parts, plain), tuple(assignments), text, at)
        )
        return plain

    def builtin(self, node: Node, children: list[Node], kind: str) -> None:
        head = self.text(children[0]) if children else ""
        args = [c for c in children[1:] if c.kind_id not in _REDIRECTS]
        for child in args:
            if child.kind_id in _ASSIGNMENT:
                self.assignment(child)
        words = (Word(head, head, head, True), *self.words(args))
        self.commands.append(
            SimpleCommand(kind, words, (), self.text(node), self.offset(node.start_byte))
        )

    def test_builtin(self, node: Node, children: list[Node]) -> None:
        # bash passes ``[`` one argument per word: the tree's expression nodes
        # (``! -v x``, ``a -a -v b``) are flattened back into those words, so every
        # operator is seen as the word it is ([ -v must be found after a '!').
        parts: list[Node] = []
        stack = list(reversed(children[1:-1]))
        while stack:
            part = stack.pop()
            if _KIND_NAME[part.kind_id] in _TEST_EXPRESSIONS:
                stack.extend(reversed(part.children))
            else:
                parts.append(part)
        words = (
            Word("[", "[", "[", True),
            *self.words(parts),
            Word("]", "]", "]", True),
        )
        self.commands.append(
            SimpleCommand("test", words, (), self.text(node), self.offset(node.start_byte))
        )

    def assignment(self, node: Node) -> Assignment:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        if name_node is not None and name_node.kind_id in _SUBSCRIPT:
            base = name_node.child_by_field_name("name")
            name = self.text(base) if base is not None else name
        result = Assignment(name, self.text(node))
        self.assignments.append(result)
        return result

    def loop_variable(self, node: Node) -> None:
        """``for NAME in …``: an assignment of NAME, decided as one (``for PATH in
        tools; do ls; done`` runs tools/ls)."""
        name_node = node.child_by_field_name("variable")
        if name_node is None:
            return
        name = self.text(name_node)
        assignment = Assignment(name, f"{name}=")
        self.assignments.append(assignment)
        self.commands.append(
            SimpleCommand(
                "loop", (), (assignment,), self.text(name_node),
                self.offset(name_node.start_byte),
            )
        )

    def assignment_only(self, node: Node, parts: list[Node]) -> None:
        assignments = tuple(self.assignment(p) for p in parts if p.kind_id in _ASSIGNMENT)
        self.commands.append(
            SimpleCommand(
                "assignment", (), assignments, self.text(node), self.offset(node.start_byte)
            )
        )

    # -- here-documents ----------------------------------------------------

    def heredoc(self, node: Node, children: list[Node]) -> Node | None:
        """Check a here-document; return its body when bash does not expand it
        (so the walk skips it)."""
        start = end = body = None
        dash = False
        for child in children:
            kind = _KIND_NAME[child.kind_id]
            if kind == "heredoc_start":
                start = child
            elif kind == "heredoc_end":
                end = child
            elif kind == "heredoc_body":
                body = child
            elif kind == "<<-":
                dash = True
        if start is None or end is None:
            self.find("R6", "here-document without a recognised end line", node, "<<")
            return None
        delimiter, quoted = _heredoc_delimiter(self.text(start))
        if self.text(end) != delimiter:
            self.find(
                "R6",
                f"here-document ends at {self.text(end)!r} but bash ends it at {delimiter!r}",
                end,
                self.text(end),
            )
        if body is None:
            return None
        text = self.text(body)
        if not quoted and "\\\n" in text:
            # bash joins backslash-newline in an expanding body before it looks
            # for the delimiter: "E\\<newline>OF" ends the document.
            text = _JOINED_LINE.sub(r"\1", text)
        lines = text.split("\n")
        if any((line.lstrip("\t") if dash else line) == delimiter for line in lines):
            self.find(
                "R6",
                f"here-document body holds the delimiter line {delimiter!r}: "
                "bash ends the document there",
                body,
                delimiter,
            )
        if quoted or body.child_count == 0:
            self.data_ranges.append((body.start_byte, body.end_byte, True))
        if quoted:
            self.literal_ranges.append((body.start_byte, body.end_byte))
            return body
        # A command substitution in an expanding body is parsed by bash from the raw
        # text: "\\&" there is an escaped backslash, then the & operator, where the
        # body's escaping made it one word (bench/fuzz_policy.py, seed 20261225).
        inner = list(body.children)
        while inner:
            node = inner.pop()
            kind = _KIND_NAME[node.kind_id]
            if kind == "command_substitution" and b"\\" in self.data[node.start_byte:node.end_byte]:
                self.find(
                    "R6",
                    "a command substitution with a backslash in a here-document body: "
                    "bash reads its escapes differently there (write it on the command "
                    "line, or quote the delimiter)",
                    node,
                    self.text(node),
                )
                break
            inner.extend(node.children)
        return None

    # -- the walk ----------------------------------------------------------

    def run(self, root: Node) -> None:
        # Children are pushed in source order and so visited in reverse; the
        # results are sorted by offset at the end.
        stack: list[tuple[Node, int, int, int]] = [(root, root.kind_id, 1, 0)]
        push = stack.append
        pop = stack.pop
        max_depth = self.max_depth
        data = self.data
        track_expansions = bool(self.expansions)
        track_literals = self.track_literals
        controls = self.controls
        dispatch = _DISPATCH
        # Module constants as locals: this loop runs once per node.
        named = _NAMED
        operator_tokens_ids = _OPERATOR_TOKENS
        leaf_ids = _LEAF
        statement_ids = _STATEMENT
        separator_ids = _SEPARATOR
        comment_ids = _COMMENT
        container_ids = _CONTAINER
        c_for_ids = _C_FOR
        expansion_ids = _EXPANSION
        subscript_ids = _SUBSCRIPT
        do_group_ids = _DO_GROUP
        number_ids = _NUMBER
        data_ids = _DATA
        literal_ids = _LITERAL
        colon_ids = _COLON
        open_bracket_ids = _OPEN_BRACKET
        expression_ids = _EXPRESSION
        operators = self.operators
        ascii_source = self.ascii
        one_line_ids = _ONE_LINE
        while stack:
            node, kind, depth, ctx = pop()
            if depth > self.depth:
                self.depth = depth
                if depth > max_depth:
                    self.find("R6", f"nesting deeper than {max_depth} levels", node)
                    return
            if ctx & _ARITH and kind not in expression_ids:
                self.arith_operand(node)
            if kind in _FOR_IN:
                self.loop_variable(node)
            action = dispatch.get(kind)
            if action == _A_COMMAND and self.plain_command(node):
                continue
            children = node.children
            child_ctx = ctx
            skip: Node | None = None
            plain: set[int] | None = None
            if action is not None:
                if action == _A_UNKNOWN:
                    name = _KIND_NAME[kind] if kind < _KIND_COUNT else str(kind)
                    self.find("R6", f"unsupported construct {name!r}", node, name)
                    continue
                if action == _A_COMMAND:
                    plain = self.command(node, children)
                elif action == _A_QUOTING:
                    child_ctx |= _DQUOTE
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, True))
                elif action == _A_COMMAND_SUBSTITUTION:
                    child_ctx &= ~_DQUOTE  # a substitution starts a new quoting context
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, False))
                    self.command_substitution(node, children, track_expansions)
                elif action == _A_EXPANSION:
                    if track_expansions:
                        self.claimed.add(node.start_byte)
                    self.expansion(node, children)
                elif action == _A_FILE_REDIRECT:
                    self.file_redirect(node, children)
                elif action == _A_ASSIGNMENT:
                    # Inside `for ((i=0; ...))` it is arithmetic, checked as such.
                    parent = node.parent
                    if not ctx & _ARITH and (
                        parent is None or parent.kind_id not in _HOLDS_ASSIGNMENTS
                    ):
                        self.assignment_only(node, [node])
                elif action == _A_ARITH_EXPANSION:
                    child_ctx |= _ARITH
                    if track_expansions:
                        self.claimed.add(node.start_byte)
                elif action == _A_PROCESS_SUBSTITUTION:
                    child_ctx &= ~_DQUOTE
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, False))
                    self.reads_file(node, children)
                elif action == _A_DECLARATION:
                    self.builtin(node, children, "declaration")
                elif action == _A_UNSET:
                    self.builtin(node, children, "unset")
                elif action == _A_ASSIGNMENTS:
                    self.assignment_only(node, children)
                elif action == _A_FUNCTION:
                    name_node = node.child_by_field_name("name")
                    self.functions.append(self.text(name_node) if name_node is not None else "")
                elif action == _A_TEST_COMMAND:
                    if _KIND_NAME[children[0].kind_id] == "[":
                        self.test_builtin(node, children)
                    else:
                        child_ctx |= _TEST
                elif action == _A_COMPOUND:
                    if _KIND_NAME[children[0].kind_id] == "((":
                        child_ctx |= _ARITH
                elif action == _A_HEREDOC:
                    skip = self.heredoc(node, children)
                elif action == _A_HERESTRING:
                    self.redirects.append(Redirect("<<<", None, self.offset(node.start_byte)))
                elif action == _A_EXPRESSION:
                    if ctx & _TEST:
                        self.test_expression(node, children)
            if not children:
                continue
            if kind in one_line_ids and len(children) > 1:
                self.check_one_line(node, children)
            c_for = kind in c_for_ids
            container = kind in container_ids
            arith_after = kind in expansion_ids or kind in subscript_ids
            prev_end = -1
            parent_name = ""
            depth += 1
            for child in children:
                ck = child.kind_id
                if container and ck not in comment_ids:
                    start = child.start_byte
                    if prev_end >= 0 and ck not in separator_ids and b"\n" in data[prev_end:start]:
                        operators.append(
                            Operator(
                                "separator",
                                "\n",
                                (";", "\n"),
                                prev_end if ascii_source else self.offset(prev_end),
                            )
                        )
                    prev_end = child.end_byte if ck in statement_ids else -1
                if not named[ck]:
                    if ck in operator_tokens_ids:
                        if arith_after and (ck in colon_ids or ck in open_bracket_ids):
                            # ${x:offset:length} and a[index] are arithmetic.
                            child_ctx |= _ARITH
                            continue
                        parent_name = parent_name or _KIND_NAME[kind]
                        self.operator(child, ck, parent_name, child is children[0])
                    elif arith_after and ck in open_bracket_ids:
                        child_ctx |= _ARITH
                    continue
                if (skip is not None and child == skip) or (plain and child.start_byte in plain):
                    continue
                cctx = child_ctx
                if c_for and ck not in do_group_ids:
                    cctx |= _ARITH
                elif cctx & _ARITH and arith_after and kind in subscript_ids:
                    if self.text(child) in ("@", "*"):
                        cctx &= ~_ARITH
                    child_ctx &= ~_ARITH  # only the index is arithmetic
                if ck in leaf_ids:
                    if cctx & _ARITH and ck not in number_ids:
                        self.arith_operand(child)
                    if controls and ck in data_ids:
                        self.data_ranges.append((child.start_byte, child.end_byte, True))
                    if (
                        track_literals
                        and ck in literal_ids
                        and not (cctx & _DQUOTE and ck not in comment_ids)
                    ):
                        self.literal_ranges.append((child.start_byte, child.end_byte))
                    continue
                push((child, ck, depth, cctx))

    def check_one_line(self, node: Node, children: list[Node]) -> None:
        """A newline ends a simple command in bash unless a backslash escapes it.
        tree-sitter-bash sometimes reads the next line as more arguments
        (``a | b -c`` newline ``sed x 2>/dev/null || c`` makes ``sed`` an
        argument of ``b``), which would hide a command."""
        data = self.data
        if b"\n" not in data[node.start_byte : node.end_byte]:
            return
        if any(c.kind_id in _HEREDOC_REDIRECT for c in children):
            return  # the body follows the line; checked by heredoc()
        end = children[0].end_byte
        for child in children[1:]:
            start = child.start_byte
            gap = data[end:start]
            at = gap.find(b"\n")
            while at >= 0:
                if at == 0 or gap[at - 1] != 0x5C:  # not a backslash-newline
                    self.find(
                        "R6",
                        "tree-sitter-bash reads this line break as part of one command, "
                        "where bash ends the command (a known misparse, e.g. after a "
                        "pipeline of three commands); end the line with ';' or send the "
                        "commands in separate calls",
                        child,
                        "\n",
                    )
                    return
                at = gap.find(b"\n", at + 1)
            end = child.end_byte

    def command_substitution(self, node: Node, children: list[Node], track: bool) -> None:
        if track:
            self.claimed.add(node.start_byte)
        self.reads_file(node, children)
        if _KIND_NAME[children[0].kind_id] in ("`", "$`"):
            self.claimed.add(node.end_byte - 1)
            inner = self.text(node)[1:-1]
            if "\\" in inner and re.search(r'\\[`$\\"]', inner):
                self.find(
                    "R6",
                    "backslash escapes inside backticks are re-parsed by bash "
                    "(nested substitution, and \\\" inside double quotes is a quote); use "
                    "$(...) instead",
                    node,
                    "`",
                )

    def reads_file(self, node: Node, children: list[Node]) -> None:
        """Decide a substitution whose last command is only ``< FILE`` as ``cat FILE``.

        bash prints the file there (``$(< f)`` is its ``$(cat f)``): in ``$( )``,
        backticks and ``<( )``/``>( )`` it runs the substitution's text one line at a
        time, and reads the file instead of opening it when the line it ran last is
        one simple command of exactly one input redirection (``<`` on fd 0), neither
        in the background nor timed. Comments, blank lines and earlier lines do not
        matter: ``$(< f #<newline>)``, ``$(#c<newline>< f)``, ``$(a<newline>< f)`` read
        f, and so does ``$(< f;)``. ``$(< f 2>/dev/null)``, ``$(< f < g)``,
        ``$(< f <<<x)``, ``$(< f &)``, ``$(3< f)`` and ``$(< f; < g)`` only open it.
        Lines are those of the raw text, as backticks, here-document bodies and bash
        5.1 run them; where bash 5.2 reprints a ``$( )`` it parsed (``a;<newline>< f``
        becomes one line) or ignores trailing blanks, the file is counted as read
        although that bash only opens it.
        """
        statements = [c for c in children
                      if _NAMED[c.kind_id] and c.kind_id not in _COMMENT]
        if not statements:
            return
        last = statements[-1]
        redirect = last
        if _KIND_NAME[last.kind_id] == "redirected_statement" and last.named_child_count == 1:
            redirect = last.named_children[0]
        if redirect.kind_id not in _FILE_REDIRECT:
            return
        parts = redirect.children
        at = 0
        if parts and _KIND_NAME[parts[0].kind_id] == "file_descriptor":
            if self.text(parts[0]).strip("0"):
                return  # 3< f opens f on another descriptor: nothing is printed
            at = 1
        if at >= len(parts) or _KIND_NAME[parts[at].kind_id] != "<":
            return
        after = [_KIND_NAME[c.kind_id] for c in children if c.start_byte >= last.end_byte]
        if "&" in after:
            return  # "< f &" runs in the background: opened, never printed
        if len(statements) > 1:
            # A line of the raw text: bash 5.2's reprinted "$( )" joins "a;<newline>< f"
            # into one line (and reads nothing), but bash 5.1 and backticks run the raw
            # text, where it is two; the file is counted as read for either bash.
            previous = statements[-2]
            if b"\n" not in self.data[previous.start_byte:last.start_byte]:
                return
        target = [c for c in parts[at + 1:] if _NAMED[c.kind_id]]
        self.commands.append(SimpleCommand(
            "command", (Word("cat", "cat", "cat", True), *self.words(target)), (),
            self.text(node), self.offset(node.start_byte)))

    def operator(self, child: Node, ck: int, parent: str, first: bool) -> None:
        token = _KIND_NAME[ck]
        key = (ck, parent, first)
        op = _OPERATOR_CACHE.get(key, _UNSEEN)
        if op is _UNSEEN:
            op = _OPERATOR_CACHE[key] = _operator_for(token, parent, first)
        if op is None:
            return
        kind, texts = op
        text = token
        if kind == "redirect":
            prev = child.prev_sibling
            if prev is not None and _KIND_NAME[prev.kind_id] == "file_descriptor":
                text = self.text(prev) + token
                texts = (text, *texts)
        at = child.start_byte
        self.operators.append(Operator(kind, text, texts, at if self.ascii else self.offset(at)))

    def arith_operand(self, node: Node) -> None:
        kind = node.kind_id
        if kind in _NUMBER or kind in _EXPRESSION:
            return
        text = self.text(node)
        if kind in _WORD and _INTEGER_LITERAL.fullmatch(text):
            return
        self.find(
            "R2",
            f"arithmetic on {text[:40]!r}: bash evaluates a variable's value as arithmetic, "
            "and an array subscript in it (a[$(cmd)]) runs a command; only number literals "
            "are allowed in $((...)), ((...)), [[ -eq ]], ${x:offset} and a[index]",
            node,
            text[:40],
        )

    def expansion(self, node: Node, children: list[Node]) -> None:
        names = [_KIND_NAME[c.kind_id] for c in children]
        if ":=" in names or "=" in names:
            # ${NAME:=word} assigns NAME: decided like a loop variable (R5), so an
            # exported name the policy set empty (GIT_CONFIG_VALUE_2="") stays as set
            target = next((c for c in children if _KIND_NAME[c.kind_id] in
                           ("variable_name", "subscript", "special_variable_name")), None)
            name = self.text(target).split("[", 1)[0] if target is not None else "?"
            assignment = Assignment(name, f"{name}=")
            self.assignments.append(assignment)
            self.commands.append(
                SimpleCommand("loop", (), (assignment,), self.text(node),
                              self.offset(node.start_byte))
            )
        if len(names) > 1 and names[1] == "!":
            self.find(
                "R2",
                "indirect expansion ${!name} evaluates the named variable's array "
                "subscript, which can run a command",
                node,
                "${!",
            )
        for i in range(len(names) - 1):
            if names[i] == "@" and names[i + 1] == "P":
                self.find(
                    "R2",
                    "prompt expansion ${name@P} runs command substitutions held in the value",
                    node,
                    "@P",
                )

    def test_expression(self, node: Node, children: list[Node]) -> None:
        op = node.child_by_field_name("operator")
        if op is None:
            return
        op_text = self.text(op)
        if op_text in _ARITH_TEST_OPERATORS:
            for child in children:
                if _NAMED[child.kind_id] and child != op and child.kind_id not in _EXPRESSION:
                    self.arith_operand(child)
        elif op_text in ("-v", "-R"):
            for child in children:
                if _NAMED[child.kind_id] and child != op and not _NAME.match(self.text(child)):
                    self.find(
                        "R2",
                        f"[[ {op_text} ]] on {self.text(child)!r}: bash evaluates an array "
                        "subscript there, which can run a command",
                        child,
                        op_text,
                    )

    def file_redirect(self, node: Node, children: list[Node]) -> None:
        operator = ""
        target: list[Node] = []
        for child in children:
            kind = child.kind_id
            if not _NAMED[kind]:
                operator = operator or _KIND_NAME[kind]
            elif _KIND_NAME[kind] != "file_descriptor":
                target.append(child)
        words = self.words(target)
        self.redirects.append(
            Redirect(operator, words[0] if words else None, self.offset(node.start_byte))
        )


# Expression nodes tree-sitter builds inside ``[ … ]`` out of separate words.
_TEST_EXPRESSIONS = frozenset({
    "unary_expression", "binary_expression", "parenthesized_expression",
    "negated_expression", "ternary_expression", "postfix_expression",
})  # fmt: skip

# An integer as bash's arithmetic reads it, with no name in it (``0+v`` evaluates v).
_INTEGER_LITERAL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")


_JOINED_LINE = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")
