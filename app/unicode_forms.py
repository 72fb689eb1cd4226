"""Unicode forms of the names and labels clients send: one spelling for text that reads
the same, whichever keyboard, platform or letter case wrote it."""

from __future__ import annotations

import unicodedata


def name_fold(text: str) -> str:
    """`text` for a comparison that ignores letter case and Unicode form: NFKC, full case
    folding (the final sigma as the other, sharp s as ss), and a dotted capital I as I
    (casefold makes it i + U+0307)."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i")
    return unicodedata.normalize("NFKC", folded)


def composed(text: str) -> str:
    """`text` in Unicode's canonical composed form (NFC): "é" as one character, as most
    keyboards write it, not "e" and a combining accent, as a Mac's file names do."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)
