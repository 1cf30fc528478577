"""task.split_sentences=true: each text cut into sentences by nltk's Punkt, each sentence a sequence of its document
(Megatron-LM's --split-sentences; the outputs are then `<out>_<key>_sentence.bin/.idx`, as its tool names them). The
end-of-document id goes after the last sentence.

Punkt's parameters for `task.lang` come from nltk's own data (`tokenizers/punkt_tab/<lang>/`, what
`python -m nltk.downloader punkt_tab` installs; NLTK_DATA says where else to look), found once by the writer: the
workers read that folder, whatever nltk's search path is in their own process. Without
`task.keep_newlines`, the whitespace after a sentence is dropped (Punkt's own spans); with it, a sentence keeps the
whitespace and newlines that follow it, so the sentences put back together are the text.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

SENTENCE_LEVEL, DOCUMENT_LEVEL = "sentence", "document"


@dataclass(frozen=True)
class SentenceSplit:
    lang: str = "english"
    keep_newlines: bool = False
    folder: str = ""  # the Punkt data of lang (set by with_punkt_folder)


def with_punkt_folder(split: SentenceSplit) -> tuple[SentenceSplit, Optional[str]]:
    """The split with its Punkt folder found, or why the splitter cannot be made here (one line)."""
    import importlib.util

    if importlib.util.find_spec("nltk") is None:
        return split, ("task.split_sentences=true: sentences are cut by nltk's Punkt, which is not installed "
                       "(pip install nltk)")
    import nltk

    try:
        folder = nltk.data.find(f"tokenizers/punkt_tab/{split.lang}/")
    except LookupError:
        return split, (f"task.split_sentences=true: nltk has no Punkt data for task.lang={split.lang} (run: python -m "
                       f"nltk.downloader punkt_tab, or point NLTK_DATA at a folder holding "
                       f"tokenizers/punkt_tab/{split.lang})")
    return replace(split, folder=str(folder)), None


def make_splitter(split: SentenceSplit) -> Callable[[str], list[str]]:
    """text -> its sentences (a text without any: no sentence)."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer, load_punkt_params

    trained = PunktSentenceTokenizer(load_punkt_params(split.folder))
    if not split.keep_newlines:
        return trained.tokenize

    def with_trailing_space(text: str) -> list[str]:
        starts = [start for start, _ in trained.span_tokenize(text)]
        if not starts:
            return []
        bounds = [0, *starts[1:], len(text)]  # each sentence runs to where the next one starts
        return [text[low:high] for low, high in zip(bounds, bounds[1:])]

    return with_trailing_space
