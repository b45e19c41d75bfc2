"""The keyword projection (lane B): a Whoosh BM25F index over text, tags and kind.

Catches exact identifiers, error strings and file names that embeddings blur.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import ranking

SCHEMA_VERSION = "3"


def _schema() -> Any:
    from whoosh.fields import ID, KEYWORD, TEXT, Schema

    return Schema(
        id=ID(stored=True, unique=True),
        kind=ID(stored=True),
        tags=KEYWORD(lowercase=True, commas=True, scorable=True),
        text=TEXT(analyzer=ranking.keyword_analyzer()),
    )


class KeywordIndex:
    def __init__(self, folder: Path, params: ranking.RankingParams) -> None:
        from whoosh import index

        self.folder = folder
        self.params = params
        self._analyzer = ranking.keyword_analyzer()
        marker = folder / "VERSION"
        fresh = True
        if folder.is_dir() and marker.is_file() and marker.read_text().strip() == SCHEMA_VERSION:
            try:
                self.ix = index.open_dir(str(folder))
                fresh = False
            except Exception:  # a corrupt projection is rebuilt, never trusted
                fresh = True
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            self.ix = index.create_in(str(folder), _schema())
            marker.write_text(SCHEMA_VERSION)
        self.created = fresh
        self._searcher: Any = None

    def _weighting(self) -> Any:
        return ranking.keyword_weighting(b=self.params.bm25_b, k1=self.params.bm25_k1)

    @property
    def searcher(self) -> Any:
        if self._searcher is not None:
            try:
                self._searcher = self._searcher.refresh()
            except TypeError:
                # Whoosh cannot refresh a searcher opened on an empty index (it has no
                # segments to compare); open a new one instead.
                self.close()
        if self._searcher is None:
            self._searcher = self.ix.searcher(weighting=self._weighting())
        return self._searcher

    def apply(self, upserts: Iterable[tuple[str, str, list[str], str]], removes: Iterable[str]) -> None:
        """Add or replace (id, kind, tags, text) documents and delete ids, in one commit."""
        from whoosh.writing import AsyncWriter

        upserts = list(upserts)
        removes = list(removes)
        if not upserts and not removes:
            return
        big = len(upserts) > 2000
        writer = self.ix.writer(procs=2, multisegment=True, limitmb=128) if big else AsyncWriter(self.ix)
        try:
            for mid in removes:
                writer.delete_by_term("id", mid)
            for mid, kind, tags, text in upserts:
                doc = {"id": mid, "kind": kind, "tags": ",".join(tags), "text": text}
                if big and self.created:
                    writer.add_document(**doc)
                else:
                    writer.update_document(**doc)
        except BaseException:
            writer.cancel()
            raise
        writer.commit()
        self.created = False

    def analyse(self, words: Iterable[str]) -> list[str]:
        out: list[str] = []
        for word in words:
            out += [t.text for t in self._analyzer(word)]
        return list(dict.fromkeys(out))

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        from whoosh.query import Or, Term

        terms = self.analyse(ranking.keyword_terms(query))
        if not terms:
            return []
        q = Or([Term("text", t) for t in terms] + [Term("tags", t) for t in terms])
        hits = self.searcher.search(q, limit=limit)
        return [(h["id"], float(h.score)) for h in hits]

    def doc_freq(self, word: str) -> int:
        terms = self.analyse([word])
        if not terms:
            return 0
        s = self.searcher
        return max(s.doc_frequency("text", t) for t in terms)

    def doc_count(self) -> int:
        return int(self.searcher.doc_count())

    def close(self) -> None:
        if self._searcher is not None:
            with contextlib.suppress(Exception):
                self._searcher.close()
            self._searcher = None
