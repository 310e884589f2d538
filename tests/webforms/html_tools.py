"""A small HTML reader for the web-form tests: elements with their attributes and text, via the standard library."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                   "wbr"})


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    parents: list[Element] = field(default_factory=list, repr=False)
    text: str = ""

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.attrs.get(name)
        return default if value is None else value

    def has(self, name: str) -> bool:
        return name in self.attrs

    def inside(self, tag: str, **attrs: str) -> Element | None:
        """The nearest enclosing element with this tag (and attribute values)."""
        for parent in reversed(self.parents):
            if parent.tag == tag and all(parent.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                return parent
        return None


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.stack: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag=tag, attrs=dict(attrs), parents=list(self.stack))
        self.elements.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag=tag, attrs=dict(attrs), parents=list(self.stack)))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.stack:
            element.text += data


def parse(html: str) -> list[Element]:
    collector = _Collector()
    collector.feed(html)
    collector.close()
    for element in collector.elements:
        # As browsers do (HTML spec, "textarea" and "pre"): one line break right after the tag is dropped.
        if element.tag in ("textarea", "pre") and element.text.startswith("\n"):
            element.text = element.text[1:]
    return collector.elements


def find(html: str | list[Element], tag: str, **attrs: str) -> list[Element]:
    """Elements with this tag whose attributes equal the given ones (``data_field`` means ``data-field``)."""
    elements = parse(html) if isinstance(html, str) else html
    wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
    return [e for e in elements if e.tag == tag and all(e.attrs.get(k) == v for k, v in wanted.items())]


def one(html: str | list[Element], tag: str, **attrs: str) -> Element:
    found = find(html, tag, **attrs)
    assert len(found) == 1, f"expected one <{tag} {attrs}>, found {len(found)}"
    return found[0]


def by_id(html: str | list[Element], element_id: str) -> Element:
    elements = parse(html) if isinstance(html, str) else html
    found = [e for e in elements if e.attrs.get("id") == element_id]
    assert len(found) == 1, f"expected one element with id {element_id!r}, found {len(found)}"
    return found[0]


def field_container(html: str | list[Element], name: str) -> Element:
    """The ``div``/``fieldset`` that holds the form field ``name``."""
    elements = parse(html) if isinstance(html, str) else html
    found = [e for e in elements if e.tag in ("div", "fieldset") and e.attrs.get("data-field") == name]
    assert len(found) == 1, f"expected one container for field {name!r}, found {len(found)}"
    return found[0]


def within(html: str | list[Element], container: Element, tag: str) -> list[Element]:
    elements = parse(html) if isinstance(html, str) else html
    return [e for e in elements if e.tag == tag and any(p is container for p in e.parents)]


def visible_text(html: str) -> str:
    """The page's text, tags dropped and whitespace collapsed."""
    body = " ".join(e.text for e in parse(html) if e.tag == "body")
    return re.sub(r"\s+", " ", body).strip()


def csrf_of(html: str) -> str:
    token = one(html, "input", type="hidden", name="handraise:csrf").get("value")
    assert token
    return token
