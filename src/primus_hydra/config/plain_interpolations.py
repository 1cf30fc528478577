"""The parse tree OmegaConf's ANTLR grammar builds for a plain interpolation string, built directly.

OmegaConf 2.3 parses a string holding `${` with its ANTLR grammar when a node is made from it (to check it) and when it
is resolved. ANTLR's Python runtime builds its decision tables on a process's first parses: ~5 ms for the first
string, ~2 ms for each new shape after it, ~12 ms of every command that resolves this project's run dir.

`plain_parse_tree(text)` answers the same tree (the grammar's own context classes, tokens of the same types and
texts, the EOF token included), which OmegaConf's visitor then reads as it reads ANTLR's, for the plain strings
configs are made of: text around interpolations of a key path (`${model.name}`, `${..lr}`) or of a resolver whose
arguments are unquoted words, numbers, `null`, booleans and interpolations (`${oc.env:ROOT,outputs}`,
`${now:%H-%M-%S}`, `${primus.times:${.lr},0.1}`). Anything else answers None and is ANTLR's to parse, and to word
the error of: a backslash, whitespace, a quote, a bracket or a brace inside an interpolation, a `$` inside one that
does not open another, an empty argument, a key that is an interpolation. tests/unit/test_plain_interpolations.py checks the trees against
ANTLR's on generated strings, the refused ones included.

The tokens follow the grammar's lexer rules (OmegaConfGrammarLexer.g4 of OmegaConf 2.3): the longest match wins, and
between matches of one length the rule written first.
"""
from __future__ import annotations

from typing import Any, Optional

from antlr4.Token import CommonToken, Token
from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser as Grammar


class _NotPlain(Exception):
    """The string is not of the plain kind: ANTLR parses it."""


# INTERPOLATION_MODE's INTER_KEY: what a key may not hold ($ may, but a plain key does not)
_NOT_IN_KEY = frozenset("\\{}()[]:. \t'\"$")
_INTERPOLATION_OPEN = "${"


def plain_parse_tree(text: str) -> Optional[Any]:
    """What `omegaconf.grammar_parser.parse(text)` returns (rule configValue, DEFAULT_MODE) for a plain string holding
    an interpolation; None for any other string."""
    if _INTERPOLATION_OPEN not in text or "\\" in text:
        return None
    try:
        return _Builder(text).config_value()
    except _NotPlain:
        return None


def _token(token_type: int, text: str) -> CommonToken:
    token = CommonToken(type=token_type)
    token.text = text
    return token


class _Builder:
    def __init__(self, text: str):
        self.text = text
        self.position = 0

    def config_value(self) -> Any:
        root = Grammar.ConfigValueContext(None)
        body = Grammar.TextContext(None, root)
        root.addChild(body)
        text, end = self.text, len(self.text)
        while self.position < end:
            start = text.find("$", self.position)
            if start == -1:
                start = end
            if start > self.position:  # ANY_STR: what stands between interpolations (no `$`, no backslash)
                body.addTokenNode(_token(Grammar.ANY_STR, text[self.position:start]))
                self.position = start
            if start < end:
                if text.startswith(_INTERPOLATION_OPEN, start):
                    body.addChild(self.interpolation(body))
                else:  # a `$` of the text: a token of its own (the lexer's DOLLAR, typed ANY_STR)
                    body.addTokenNode(_token(Grammar.ANY_STR, "$"))
                    self.position += 1
        root.addTokenNode(_token(Token.EOF, "<EOF>"))
        return root

    def interpolation(self, parent: Any) -> Any:
        """`${` at the position: an interpolation of a key path or of a resolver (INTERPOLATION_MODE)."""
        context = Grammar.InterpolationContext(None, parent)
        self.position += len(_INTERPOLATION_OPEN)
        opening = _token(Grammar.INTER_OPEN, _INTERPOLATION_OPEN)
        path = self.key_path()
        following = self.next_char()
        if following == "}":
            context.addChild(self.node_interpolation(context, opening, path))
        elif following == ":":
            context.addChild(self.resolver_interpolation(context, opening, path))
        else:
            raise _NotPlain
        return context

    def key_path(self) -> list[tuple[int, str]]:
        """The tokens up to the `:` or `}` that ends the interpolation's head: DOTs and keys (ID, INTER_KEY)."""
        tokens = []
        text = self.text
        while self.position < len(text):
            char = text[self.position]
            if char == ".":
                tokens.append((Grammar.DOT, "."))
                self.position += 1
                continue
            end = self.position
            while end < len(text) and text[end] not in _NOT_IN_KEY:
                end += 1
            if end == self.position:
                break
            key = text[self.position:end]  # ID where all of it is one (the first rule of a tie), else INTER_KEY
            tokens.append((Grammar.ID if _id_end(key, 0) == len(key) else Grammar.INTER_KEY, key))
            self.position = end
        return tokens

    def next_char(self) -> str:
        if self.position >= len(self.text):
            raise _NotPlain
        return self.text[self.position]

    def node_interpolation(self, parent: Any, opening: CommonToken, path: list[tuple[int, str]]) -> Any:
        """INTER_OPEN DOT* configKey (DOT configKey)* INTER_CLOSE."""
        dots = 0
        while dots < len(path) and path[dots][0] == Grammar.DOT:
            dots += 1
        keys = path[dots::2]
        if not keys or any(token_type == Grammar.DOT for token_type, _ in keys) \
                or any(token_type != Grammar.DOT for token_type, _ in path[dots + 1::2]) or path[-1][0] == Grammar.DOT:
            raise _NotPlain
        context = Grammar.InterpolationNodeContext(None, parent)
        context.addTokenNode(opening)
        for token_type, text in path:
            if token_type == Grammar.DOT:
                context.addTokenNode(_token(token_type, text))
            else:
                key = Grammar.ConfigKeyContext(None, context)
                key.addTokenNode(_token(token_type, text))
                context.addChild(key)
        self.position += 1
        context.addTokenNode(_token(Grammar.INTER_CLOSE, "}"))
        return context

    def resolver_interpolation(self, parent: Any, opening: CommonToken, path: list[tuple[int, str]]) -> Any:
        """INTER_OPEN resolverName COLON sequence? BRACE_CLOSE, the name of IDs only."""
        names, dots = path[::2], path[1::2]
        if not names or len(path) % 2 == 0 or any(token_type != Grammar.ID for token_type, _ in names) \
                or any(token_type != Grammar.DOT for token_type, _ in dots):
            raise _NotPlain
        context = Grammar.InterpolationResolverContext(None, parent)
        context.addTokenNode(opening)
        name = Grammar.ResolverNameContext(None, context)
        for token_type, text in path:
            name.addTokenNode(_token(token_type, text))
        context.addChild(name)
        self.position += 1
        context.addTokenNode(_token(Grammar.COLON, ":"))
        if self.next_char() != "}":
            context.addChild(self.sequence(context))
        self.position += 1  # the sequence ends at its BRACE_CLOSE
        context.addTokenNode(_token(Grammar.BRACE_CLOSE, "}"))
        return context

    def sequence(self, parent: Any) -> Any:
        """element (COMMA element)*, each element one primitive, up to the `}` (VALUE_MODE)."""
        context = Grammar.SequenceContext(None, parent)
        while True:
            element = Grammar.ElementContext(None, context)
            primitive = Grammar.PrimitiveContext(None, element)
            while True:
                char = self.next_char()
                if char == "}" or char == ",":
                    break
                if self.text.startswith(_INTERPOLATION_OPEN, self.position):
                    primitive.addChild(self.interpolation(primitive))
                else:
                    primitive.addTokenNode(self.value_token())
            if primitive.getChildCount() == 0:
                raise _NotPlain  # an empty argument: the grammar warns of it
            element.addChild(primitive)
            context.addChild(element)
            if char == "}":
                return context
            self.position += 1
            context.addTokenNode(_token(Grammar.COMMA, ","))

    def value_token(self) -> CommonToken:
        """The lexer's longest VALUE_MODE match at the position, of the plain rules (in the grammar's order, the
        first of a tie wins: COLON, FLOAT, INT, BOOL, NULL, UNQUOTED_CHAR, ID)."""
        text, start = self.text, self.position
        best_type, best_end = None, start
        for token_type, end in ((Grammar.COLON, start + 1 if text[start] == ":" else -1),
                                (Grammar.FLOAT, _float_end(text, start)), (Grammar.INT, _int_end(text, start)),
                                (Grammar.BOOL, _word_end(text, start, ("true", "false"))),
                                (Grammar.NULL, _word_end(text, start, ("null",))),
                                (Grammar.UNQUOTED_CHAR, start + 1 if text[start] in _UNQUOTED_CHARS else -1),
                                (Grammar.ID, _id_end(text, start))):
            if end > best_end:
                best_type, best_end = token_type, end
        if best_type is None:
            raise _NotPlain
        self.position = best_end
        return _token(best_type, text[start:best_end])


# VALUE_MODE's rules, as the end of their longest match at `start` (-1: none); the grammar's backslash is not plain
_UNQUOTED_CHARS = frozenset("/-+.$%*@?|")
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_ID_CHARS = _ID_START | frozenset("0123456789-")
_DIGITS = frozenset("0123456789")


def _id_end(text: str, start: int) -> int:
    if start >= len(text) or text[start] not in _ID_START:
        return -1
    end = start + 1
    while end < len(text) and text[end] in _ID_CHARS:
        end += 1
    return end


def _word_end(text: str, start: int, words: tuple[str, ...]) -> int:
    """BOOL's and NULL's words, in any case."""
    return max((start + len(word) for word in words if text[start:start + len(word)].lower() == word), default=-1)


def _digits_end(text: str, start: int) -> int:
    """DIGIT (('_')? DIGIT)*"""
    if start >= len(text) or text[start] not in _DIGITS:
        return -1
    end = start + 1
    while True:
        if end < len(text) and text[end] in _DIGITS:
            end += 1
        elif end + 1 < len(text) and text[end] == "_" and text[end + 1] in _DIGITS:
            end += 2
        else:
            return end


def _unsigned_int_end(text: str, start: int) -> int:
    """INT_UNSIGNED: '0' | [1-9] (('_')? DIGIT)*"""
    if start >= len(text) or text[start] not in _DIGITS:
        return -1
    return start + 1 if text[start] == "0" else _digits_end(text, start)


def _after_sign(text: str, start: int) -> int:
    return start + 1 if start < len(text) and text[start] in "+-" else start


def _int_end(text: str, start: int) -> int:
    return _unsigned_int_end(text, _after_sign(text, start))


def _float_end(text: str, start: int) -> int:
    """FLOAT: [+-]? (POINT_FLOAT | EXPONENT_FLOAT | inf | nan), inf and nan in any case."""
    at = _after_sign(text, start)
    whole = _unsigned_int_end(text, at)
    points = []  # POINT_FLOAT: INT_UNSIGNED '.' | INT_UNSIGNED? '.' DIGIT (('_')? DIGIT)*
    for dot in (whole, at):
        if dot != -1 and dot < len(text) and text[dot] == ".":
            if dot == whole:
                points.append(dot + 1)
            points.append(_digits_end(text, dot + 1))
    ends = [*points, _word_end(text, at, ("inf", "nan"))]
    for base in (whole, *points):  # EXPONENT_FLOAT: (INT_UNSIGNED | POINT_FLOAT) [eE] [+-]? DIGIT (('_')? DIGIT)*
        if base != -1 and base < len(text) and text[base] in "eE":
            ends.append(_digits_end(text, _after_sign(text, base + 1)))
    return max(ends)
