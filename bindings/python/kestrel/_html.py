"""Small HTML tables for Jupyter (_repr_html_), values escaped."""
import html
from typing import Any, Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class HtmlList(list[Any]):
    """A list that Jupyter shows as a table: subclasses say HEADERS and row()."""
    HEADERS: Sequence[str] = ()

    @staticmethod
    def row(item: Any) -> Sequence[Any]:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return table(self.HEADERS, (self.row(x) for x in self)) if self else "<i>none</i>"
