"""Development only (ACLSum val, with the aspect summary as the question, 200-token budget): highlight recall of the
current fused selection vs the same with the opening sentence always kept. Selection only, scored as
compress_spread.py scores (a highlight recalled when one kept sentence covers >= 50 % of its content words)."""
import sys, statistics
sys.path.insert(0, 'benchmarks'); sys.path.insert(0, 'benchmarks/tasks')
from compress_spread import recall, abstract_sizes, without_abstract
from datasets import aclsum_documents
from common import DEFAULT_MODEL, engine
from tiankong import Client
from tiankong.tasks.extractive import select
from tiankong.tasks.retrieval import bm25_scores, rrf, embedding_scores
from tiankong.models.catalog import EMBEDDING_MODEL

docs = aclsum_documents('val')
sizes = abstract_sizes('val')
out = {}
with engine(DEFAULT_MODEL, 1, 8192) as (url, name), Client(url, timeout_s=600.0) as client:
    for doc in docs:
        for version, d in (('paper', doc), ('spread', without_abstract(doc, sizes[doc['id']]))):
            sents = d['sentences']; budget = 200
            costs = [len(client.tokenize(s)) + 1 for s in sents]
            for aspect, question in d['summary'].items():
                gold = [s for s, f in zip(sents, d['highlights'][aspect]) if f]
                if not gold:
                    continue
                lex = bm25_scores(question, sents)
                emb = client._run(embedding_scores(question, sents, EMBEDDING_MODEL)).cosine
                fused = rrf([lex] * 4 + [emb])
                cur = select(fused, costs, budget)
                lede = [0] + [j + 1 for j in select(fused[1:], costs[1:], budget - costs[0])] if costs[0] <= budget // 2 else cur
                out.setdefault((version, 'fused (current)'), []).append(recall(gold, [sents[i] for i in cur]))
                out.setdefault((version, 'fused + lede'), []).append(recall(gold, [sents[i] for i in lede]))
for k, v in out.items():
    print(k, len(v), round(statistics.mean(v), 3))
