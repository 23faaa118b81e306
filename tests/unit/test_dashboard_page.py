"""What the dashboard's static files promise, read without a browser (the
browser test in tests/e2e/test_web.py draws them)."""

import re
from pathlib import Path

STATIC = Path(__file__).parents[2] / "services" / "web" / "static"


def test_the_font_stack_falls_back_to_each_platforms_japanese_chinese_and_korean_fonts():
    css = (STATIC / "dashboard.css").read_text()
    stack = [name.strip().strip('"') for name in re.search(r"body \{\s*font: [^ ]+ ([^;]+);", css)[1].split(",")]
    assert stack[0] == "system-ui" and stack[-1] == "sans-serif"
    for script, families in {
            "Japanese": {"Hiragino Sans", "Yu Gothic", "Meiryo", "Noto Sans CJK JP"},
            "Chinese": {"PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC"},
            "Korean": {"Apple SD Gothic Neo", "Malgun Gothic", "Noto Sans CJK KR"}}.items():
        assert families <= set(stack), script

