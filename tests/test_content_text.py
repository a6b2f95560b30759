"""One content-to-text: adapters (``text_of``), the replica picker's prefix key and the semantic
router's prompt text all read a message's content the same way."""

from __future__ import annotations

from unillm.content import content_text, text_of

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
PARTS = [{"type": "text", "text": "look"}, IMAGE, {"type": "text", "text": "here"}]


def test_a_string_content_is_its_own_text() -> None:
    assert content_text("hello") == "hello"


def test_text_parts_are_joined_by_newlines_and_images_left_out() -> None:
    assert content_text(PARTS) == "look\nhere"


def test_an_image_part_is_written_by_the_image_writer_when_given() -> None:
    assert content_text(PARTS, lambda part: f"<{part['type']}>") == "look\n<image_url>\nhere"


def test_no_content_is_no_text() -> None:
    assert content_text(None) == ""


def test_a_messages_text_adds_its_tool_calls_as_json() -> None:
    message = {"role": "assistant", "content": PARTS, "tool_calls": [{"id": "c1"}]}
    assert text_of(message) == 'look\nhere[{"id": "c1"}]'
