"""The contract's tokenization as an oracle written independently of Spark
and Java, and lines that are hard to tokenize; for the text processor's tests."""

import regex

# Java's \w with UNICODE_CHARACTER_CLASS, as its Pattern documentation defines it:
# [\p{Alpha}\p{gc=Mn}\p{gc=Me}\p{gc=Mc}\p{Digit}\p{gc=Pc}\p{IsJoin_Control}]
JAVA_WORD_RUN = regex.compile(r"[\p{Alphabetic}\p{Mn}\p{Me}\p{Mc}\p{Nd}\p{Pc}\p{Join_Control}]+")


def oracle(line: str):
    """Lower-case (locale-independent), then the runs between non-word runs."""
    return JAVA_WORD_RUN.findall(line.lower())


HARD_LINES = [
    "The quick brown fox jumps over the lazy dog",
    "Café crème brûlée",  # precomposed accents
    "Cafe\u0301 cre\u0300me",  # combining marks belong to the word
    "東京タワーは高い。日本語の文章です",  # CJK, katakana, the prolonged sound mark (Lm)
    "ПРИВЕТ, Мир! Ёжик",  # Cyrillic
    "ΟΔΟΣ ΣΟΦΟΣ ΣΊΣΥΦΟΣ Σ",  # Greek: a final capital sigma lower-cases to ς
    "don't won’t l'amour",  # apostrophes split words
    "state-of-the-art — well‐known",  # hyphen, em dash, U+2010
    "snake_case __init__ a‿b",  # connector punctuation is part of a word
    "Route 66, ١٢٣ and １２３ Ⅻ",  # ASCII, Arabic-Indic and fullwidth digits; a Roman numeral
    "I ❤️ 🍕 pizza 👨‍👩‍👧",  # emoji split words; VS16 (Mn) and ZWJ are word characters
    "...hello!!! (world) «quoted» ¿qué?",  # leading and trailing punctuation
    "   \t  ",  # whitespace only
    "",
    "İSTANBUL Straße ẞ ǅemal ﬁne",  # İ -> i̇, capital sharp s, a titlecase digraph, a ligature
    "tab\tnew\nline\r\nend",
    "Ⓐ circled letters",  # a symbol that is Alphabetic
]
