"""CorpusFeed puts into NGRAM's trie what SGLang's own step would, only later and in fewer calls."""

from types import SimpleNamespace

from moe_sglang.ngram_worker import CorpusFeed, lookup

DEPTH = 4


class Recorder:
    def __init__(self):
        self.puts: list[list[list[int]]] = []

    def batch_put(self, batch_tokens):
        self.puts.append([list(t) for t in batch_tokens])

    def synchronize(self):
        pass

    def batch_get(self, rids, contexts, lengths):
        return [[0] * 2 for _ in rids], [[True] * 4 for _ in rids]


def req(rid, prompt, output):
    return SimpleNamespace(rid=rid, origin_input_ids_unpadded=prompt, origin_input_ids=prompt, output_ids=output)


def sglang_windows(reqs):
    """What NGRAMWorker._update_ngram_corpus (installed SGLang, no overlap) puts for these requests."""
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    corpus = Recorder()
    fake = SimpleNamespace(draft_token_num=2, enable_overlap=False, max_trie_depth=DEPTH, ngram_corpus=corpus)
    fake._efficient_concat_last_n = lambda a, b, n: NGRAMWorker._efficient_concat_last_n(fake, a, b, n)
    NGRAMWorker._update_ngram_corpus(fake, SimpleNamespace(reqs=reqs, grammar_needs_sync=lambda: False))
    return corpus.puts[0]


def steps():
    """Three decode steps of two requests: short and long outputs, a prompt shorter than the depth."""
    a, b = req("a", [1, 2], [3]), req("b", [10, 11, 12, 13, 14], [])
    for token in (4, 5, 6):
        a.output_ids = [*a.output_ids, token]
        b.output_ids = [*b.output_ids, token + 20]
        yield [a, b]


def test_windows_are_sglangs_and_wait_for_a_reader():
    corpus = Recorder()
    feed = CorpusFeed(corpus, DEPTH)
    expected = []
    for reqs in steps():
        feed.add(reqs)
        expected += sglang_windows(reqs)
    assert corpus.puts == []  # nobody looked up yet
    feed.flush()
    assert corpus.puts == [expected]


def test_a_lookup_flushes_first_and_the_step_limit_flushes():
    corpus = Recorder()
    worker = SimpleNamespace(draft_token_num=2, max_trie_depth=DEPTH, ngram_corpus=corpus)
    worker.corpus_feed = CorpusFeed(corpus, DEPTH)
    reqs = next(steps())
    worker.corpus_feed.add(reqs)
    lookup(worker, reqs, rows=[0])
    assert corpus.puts == [sglang_windows(reqs)]
    for _ in range(CorpusFeed.FLUSH_STEPS):
        worker.corpus_feed.add(reqs)
    assert len(corpus.puts) == 2 and len(corpus.puts[1]) == CorpusFeed.FLUSH_STEPS * len(reqs)


def test_drop_forgets_held_windows():
    corpus = Recorder()
    feed = CorpusFeed(corpus, DEPTH)
    feed.add(next(steps()))
    feed.drop()
    feed.flush()
    assert corpus.puts == []


def test_a_step_that_looked_up_hands_its_windows_over_at_its_end():
    """The next lookup then finds them inserted; a step that looked nothing up keeps holding them back."""
    from moe_sglang.ngram_worker import _update_corpus

    corpus = Recorder()
    worker = SimpleNamespace(ngram_corpus=corpus, corpus_feed=CorpusFeed(corpus, DEPTH), _prev_decode_rids=set())
    batches = list(steps())
    _update_corpus(worker, SimpleNamespace(reqs=batches[0]), looked_up=False)
    assert corpus.puts == []
    _update_corpus(worker, SimpleNamespace(reqs=batches[1]), looked_up=True)
    assert corpus.puts == [sglang_windows(batches[0]) + sglang_windows(batches[1])]
