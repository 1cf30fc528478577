"""task.split_sentences=true: each text cut into sentences by nltk's Punkt, each sentence a sequence of its document
(Megatron-LM's --split-sentences; the outputs are then `<out>_<key>_sentence.bin/.idx`, as its tool names them). The
end-of-document id goes after the last sentence.

Punkt's parameters for `task.lang` come from nltk's own data (`tokenizers/punkt_tab/<lang>/`, what
`python -m nltk.downloader punkt_tab` installs; NLTK_DATA says where else to look). Without
`task.keep_newlines`, the whitespace after a sentence is dropped (Punkt's own spans); with it, a sentence keeps the
whitespace and newlines that follow it, so the sentences put back together are the text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

SENTENCE_LEVEL, DOCUMENT_LEVEL = "sentence", "document"


@dataclass(frozen=True)
class SentenceSplit:
    lang: str = "english"
    keep_newlines: bool = False


def splitter_failure(split: SentenceSplit) -> Optional[str]:
    """Why the splitter cannot be made here (one line), or None."""
    import importlib.util

    if importlib.util.find_spec("nltk") is None:
        return "task.split_sentences=true: sentences are cut by nltk's Punkt, which is not installed (pip install nltk)"
    import nltk

    try:
        nltk.data.find(f"tokenizers/punkt_tab/{split.lang}/")
    except LookupError:
        return (f"task.split_sentences=true: nltk has no Punkt data for task.lang={split.lang} (run: python -m "
                f"nltk.downloader punkt_tab, or point NLTK_DATA at a folder holding tokenizers/punkt_tab/{split.lang})")
    return None


def make_splitter(split: SentenceSplit) -> Callable[[str], list[str]]:
    """text -> its sentences (a text without any: no sentence)."""
    from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer, PunktTokenizer

    trained = PunktTokenizer(split.lang)
    if not split.keep_newlines:
        return trained.tokenize

    class TrailingSpaceKept(PunktLanguageVars):
        """A sentence end's context allows the whitespace after it, so that whitespace stays in the sentence."""

        _period_context_fmt = r"""
            \S*                       # the word the end marker closes
            %(SentEndChars)s          # a possible sentence end
            \s*                       # whitespace, newlines included, kept with the sentence
            (?=(?P<after_tok>
                %(NonWord)s           # punctuation next
                |
                (?P<next_tok>\S+)     # or the next word
            ))"""

    return PunktSentenceTokenizer(train_text=trained._params, lang_vars=TrailingSpaceKept()).tokenize
