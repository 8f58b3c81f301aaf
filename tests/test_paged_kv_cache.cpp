// The paged cache (paged_kv_cache.hpp) and the batched call (attend on an AttentionBatch): a
// sequence in blocks scattered over a pool gives the bits of the same keys and values in one packed
// store, for every storage type and block size; forks share blocks and copy a partly filled one on
// write; truncating and freeing give blocks back; a batch of sequences at different lengths, with or
// without a shared prefix attended once for all, gives each one's bits alone on any thread count; a
// windowed layer decoding through a pool keeps a flat number of blocks and equals its forward; and
// what does not fit is refused by name, changing nothing.
#include <random>
#include <string>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/attend_batch.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/paged_decoding.hpp"
#include "headwise/paged_kv_cache.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using Catch::Matchers::Contains;

namespace {

template <class Scalar>
PagedKvShape shape_of(Index blocks, Index block_tokens, Index G, Index d, KvStorage storage = KvStorage::as_computed) {
  PagedKvShape s;
  s.blocks = blocks, s.block_tokens = block_tokens, s.kv.n_kv_heads = G, s.kv.d_head = d;
  s.kv.format.storage = storage;
  return s;
}

/// z and logsumexp of one call, side by side, for bitwise comparison.
template <class Scalar>
Eigen::MatrixXd result_of(const AttentionResult<Scalar>& r) {
  Eigen::MatrixXd out(r.z.rows() + r.logsumexp.cols(), std::max(r.z.cols(), r.logsumexp.rows()));
  out.setZero();
  out.topRows(r.z.rows()).leftCols(r.z.cols()) = headwise_test::as_double(r.z);
  out.bottomRows(r.logsumexp.cols()).leftCols(r.logsumexp.rows()) = headwise_test::as_double(r.logsumexp).transpose();
  return out;
}

template <class Scalar>
AttentionCall call_of(Heads heads, const AttentionOptions& options, Index key_shard = 128) {
  AttentionCall call;
  call.heads = heads, call.options = &options, call.logsumexp = true;
  call.tiles.key_shard = key_shard;
  return call;
}

}  // namespace

TEMPLATE_TEST_CASE("paged cache: a sequence in scattered blocks gives the bits of one packed store", "[paged]", float, double) {
  std::mt19937 rng(11);
  const Index G = 2, H = 6, d = 20, n = 300;
  const Index block = GENERATE(1, 2, 3) * KvBlocks<TestType>::lanes;
  const KvStorage storage = std::is_same_v<TestType, float> ? GENERATE(KvStorage::as_computed, KvStorage::bf16, KvStorage::f16, KvStorage::int8)
                                                            : KvStorage::as_computed;
  CAPTURE(block, storage_name(storage));
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, G * d, rng), v = headwise_test::random_matrix<TestType>(n, G * d, rng);
  PagedKvCache<TestType> pool(shape_of<TestType>(2 * n / block + 4, block, G, d, storage));
  const Index s = pool.add_sequence(), other = pool.add_sequence();
  // Appended in uneven pieces, interleaved with another sequence: the blocks alternate in the pool.
  const Matrix<TestType> filler = headwise_test::random_matrix<TestType>(n, G * d, rng);
  for (Index i0 = 0, piece = 1; i0 < n; i0 += piece, piece = piece * 3 % 97 + 1) {
    const Index m = std::min(piece, n - i0);
    pool.append(s, k.middleRows(i0, m), v.middleRows(i0, m), /*threads=*/2);
    pool.append(other, filler.middleRows(i0, m), filler.middleRows(i0, m));
  }
  PackedKeysValues<TestType> packed(n, G, d, d, {ValueStorage::own, storage});
  packed.append(k, v);
  const KvBlocks<TestType> seq = pool.sequence(s);
  REQUIRE(seq.size() == n);
  CHECK(pool.block_table(s)[1] != pool.block_table(s)[0] + 1);  // not one run of the pool
  for (const Index j : {Index(0), block - 1, block, n - 1})
    for (const Index c : {Index(0), d - 1}) {
      CHECK(seq.key(1, j, c) == packed.key(1, j, c));
      CHECK(seq.value(0, j, c) == packed.value(0, j, c));
    }
  AttentionOptions options;
  options.threads = GENERATE(1, 3);
  for (const Index m : {Index(1), Index(37)}) {
    CAPTURE(m, options.threads);
    const Matrix<TestType> q = headwise_test::random_matrix<TestType>(m, H * d, rng);
    const AttentionCall call = call_of<TestType>({H, G}, options);
    CHECK_THAT(result_of(attend<TestType>(q, seq, call)), IsExactly(result_of(attend<TestType>(q, packed, call))));
  }
}

TEST_CASE("paged cache: forks share blocks and copy a partly filled one on write, truncate and free give blocks back", "[paged]") {
  std::mt19937 rng(12);
  const Index G = 2, H = 4, d = 16, B = 64, prompt = 100;
  PagedKvCache<float> pool(shape_of<float>(12, B, G, d));
  const Matrix<float> k = headwise_test::random_matrix<float>(400, G * d, rng), v = headwise_test::random_matrix<float>(400, G * d, rng);
  const Index root = pool.add_sequence();
  pool.append(root, k.topRows(prompt), v.topRows(prompt));
  REQUIRE(pool.free_blocks() == 10);
  const Index a = pool.fork(root), b = pool.fork(root);
  CHECK(pool.free_blocks() == 10);  // nothing copied yet
  CHECK(pool.references(pool.block_table(root)[1]) == 3);
  // a appends into the shared, partly filled block: it gets a copy; root and b keep the original.
  pool.append(a, k.middleRows(prompt, 50), v.middleRows(prompt, 50));
  CHECK(pool.block_table(a)[0] == pool.block_table(root)[0]);
  CHECK(pool.block_table(a)[1] != pool.block_table(root)[1]);
  CHECK(pool.references(pool.block_table(root)[1]) == 2);
  pool.append(b, k.middleRows(200, 120), v.middleRows(200, 120));
  // Each sequence holds exactly its own tokens: the bits of a packed store of them.
  const auto check_holds = [&](Index s, const std::vector<std::pair<Index, Index>>& runs) {
    Index total = 0;
    for (const auto& r : runs) total += r.second;
    PackedKeysValues<float> packed(total, G, d, d);
    for (const auto& r : runs) packed.append(k.middleRows(r.first, r.second), v.middleRows(r.first, r.second));
    const Matrix<float> q = headwise_test::random_matrix<float>(3, H * d, rng);
    const AttentionOptions options;
    const AttentionCall call = call_of<float>({H, G}, options, 64);
    CHECK_THAT(result_of(attend<float>(q, pool.sequence(s), call)), IsExactly(result_of(attend<float>(q, packed, call))));
  };
  check_holds(root, {{0, prompt}});
  check_holds(a, {{0, prompt}, {prompt, 50}});
  check_holds(b, {{0, prompt}, {200, 120}});
  // Truncating gives the blocks past the new end back (b's own copy of block 1 stays, written in place).
  const Index before = pool.free_blocks();
  pool.truncate(b, 80);
  CHECK(pool.free_blocks() == before + 2);
  pool.append(b, k.middleRows(330, 10), v.middleRows(330, 10));
  CHECK(pool.free_blocks() == before + 2);
  check_holds(b, {{0, 80}, {330, 10}});
  // A fork truncated into the shared block copies it when it appends; the root keeps its tokens.
  const Index c = pool.fork(root);
  pool.truncate(c, 70);
  pool.append(c, k.middleRows(350, 5), v.middleRows(350, 5));
  CHECK(pool.block_table(c)[1] != pool.block_table(root)[1]);
  check_holds(c, {{0, 70}, {350, 5}});
  check_holds(root, {{0, prompt}});
  pool.free(c);
  // Freeing the root keeps what its forks hold; freeing all gives every block back.
  pool.free(root);
  check_holds(a, {{0, prompt}, {prompt, 50}});
  pool.free(a), pool.free(b);
  CHECK(pool.free_blocks() == pool.block_count());
}

TEST_CASE("batched attention: every sequence of a ragged batch gets its bits alone, on any thread count", "[paged][batch]") {
  std::mt19937 rng(13);
  const Index G = 2, H = 8, d = 16, B = 32;
  const std::string variant = GENERATE("causal", "sinks", "softcap", "window", "statistics");
  AttentionOptions options;
  if (variant == "sinks") options.sinks = Vector<double>::LinSpaced(H, -2.0, 3.0);
  if (variant == "softcap") options.softcap = 3.0;
  if (variant == "window") options.window = 300;
  options.threads = GENERATE(1, 3);
  CAPTURE(variant, options.threads);
  PagedKvCache<float> pool(shape_of<float>(200, B, G, d));
  const std::vector<Index> lengths = {1, 17, 130, 300, 700, 64, 390};
  const std::vector<Index> new_tokens = {1, 1, 1, 1, 1, 40, 129};
  AttentionBatch<float> batch;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const Index s = pool.add_sequence();
    pool.append(s, headwise_test::random_matrix<float>(lengths[i], G * d, rng), headwise_test::random_matrix<float>(lengths[i], G * d, rng));
    batch.sequences.emplace_back(headwise_test::random_matrix<float>(new_tokens[i], H * d, rng), pool.sequence(s));
  }
  AttentionCall call = call_of<float>({H, G}, options);
  call.statistics = variant == "statistics";
  const std::vector<AttentionResult<float>> together = attend(batch, call);
  REQUIRE(together.size() == lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    CAPTURE(i);
    const AttentionResult<float> alone = attend<float>(batch.sequences[i].q, batch.sequences[i].kv, call);
    CHECK_THAT(result_of(together[i]), IsExactly(result_of(alone)));
    if (!call.statistics) continue;
    CHECK_THAT(headwise_test::as_double(together[i].statistics.entropy), IsExactly(alone.statistics.entropy));
    CHECK_THAT(headwise_test::as_double(together[i].statistics.max_weight), IsExactly(alone.statistics.max_weight));
    CHECK_THAT(together[i].statistics.argmax.cast<double>(), IsExactly(alone.statistics.argmax.cast<double>()));
    CHECK_THAT(headwise_test::as_double(together[i].statistics.previous_token_mass), IsExactly(alone.statistics.previous_token_mass));
  }
}

TEST_CASE("batched attention: a shared prefix attended once for all its sequences gives each one's bits alone", "[paged][batch]") {
  std::mt19937 rng(14);
  const Index G = 2, H = 8, d = 16, B = 32, prompt = 300;  // two shards of 128, and 44 tokens more
  const std::string variant = GENERATE("causal", "sinks", "softcap");
  AttentionOptions options;
  if (variant == "sinks") options.sinks = Vector<double>::LinSpaced(H, -2.0, 3.0);
  if (variant == "softcap") options.softcap = 3.0;
  options.threads = GENERATE(1, 2);
  CAPTURE(variant, options.threads);
  PagedKvCache<float> pool(shape_of<float>(200, B, G, d));
  const Index root = pool.add_sequence();
  pool.append(root, headwise_test::random_matrix<float>(prompt, G * d, rng), headwise_test::random_matrix<float>(prompt, G * d, rng));
  AttentionBatch<float> batch;
  batch.shared_prefix = prompt;
  const std::vector<Index> own = {0, 1, 5, 150, 40, 0};
  const std::vector<Index> new_tokens = {1, 1, 1, 1, 40, 100};  // (the last one's first rows sit inside the prefix)
  for (std::size_t i = 0; i < own.size(); ++i) {
    const Index s = pool.fork(root);
    pool.append(s, headwise_test::random_matrix<float>(own[i], G * d, rng), headwise_test::random_matrix<float>(own[i], G * d, rng));
    batch.sequences.emplace_back(headwise_test::random_matrix<float>(new_tokens[i], H * d, rng), pool.sequence(s), /*shares=*/true);
  }
  const Index stranger = pool.add_sequence();  // a sequence of the batch that shares nothing
  pool.append(stranger, headwise_test::random_matrix<float>(400, G * d, rng), headwise_test::random_matrix<float>(400, G * d, rng));
  batch.sequences.emplace_back(headwise_test::random_matrix<float>(1, H * d, rng), pool.sequence(stranger));
  const AttentionCall call = call_of<float>({H, G}, options);
  const std::vector<AttentionResult<float>> together = attend(batch, call);
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    CAPTURE(i);
    CHECK_THAT(result_of(together[i]), IsExactly(result_of(attend<float>(batch.sequences[i].q, batch.sequences[i].kv, call))));
  }
}

TEST_CASE("paged cache: a windowed layer decoding through a pool keeps a flat number of blocks and equals its forward", "[paged]") {
  std::mt19937 rng(15);
  const Index d_model = 32, H = 4, G = 2, window = 100, n = 300, B = KvBlocks<float>::lanes;
  LayerConfig config;
  config.window = window;
  const MultiHeadAttention<float> layer = headwise_test::random_layer<float>(d_model, H, G, rng, 1.0, config);
  const Matrix<float> x = headwise_test::random_matrix<float>(n, d_model, rng);
  const Matrix<float> full = layer.forward(x);
  PagedKvCache<float> pool = make_paged_cache(layer, /*blocks=*/(window + B - 1) / B + 2, B);
  const Index s = pool.add_sequence();
  Matrix<float> decoded(n, d_model);
  decoded.topRows(30) = decode_paged(layer, x.topRows(30), pool, s);
  Index most_blocks = 0;
  for (Index t = 30; t < n; ++t) {
    decoded.row(t) = decode_paged(layer, x.row(t), pool, s);
    most_blocks = std::max(most_blocks, static_cast<Index>(pool.block_table(s).size()));
  }
  CHECK_THAT(headwise_test::as_double(decoded), IsExactly(full));
  CHECK(most_blocks <= (window + B - 1) / B + 1);
  CHECK(pool.first_kept(s) > 0);
  CHECK_THROWS_WITH(pool.truncate(s, 10), Contains("let go"));
  // A call whose queries would see a key let go is refused.
  AttentionOptions wider;
  wider.window = 2 * window;
  CHECK_THROWS_WITH(decode_paged(layer, x.row(0), pool, s, wider), Contains("window"));
}

TEST_CASE("paged cache: a layer's batched call gives each sequence's rows of its call alone, a shared prompt included", "[paged][batch]") {
  std::mt19937 rng(17);
  const Index d_model = 32, H = 4, G = 2, prompt = 1030;  // past the layer's key shard of 1024
  LayerConfig config;
  config.rope = RopeConfig{};
  config.rope->d_head = d_model / H;
  const MultiHeadAttention<float> layer = headwise_test::random_layer<float>(d_model, H, G, rng, 1.0, config);
  PagedKvCache<float> alone = make_paged_cache(layer, 200, 32), together = make_paged_cache(layer, 200, 32);
  const Matrix<float> first = headwise_test::random_matrix<float>(prompt, d_model, rng);
  const Index root_a = alone.add_sequence(), root_t = together.add_sequence();
  decode_paged(layer, first, alone, root_a), decode_paged(layer, first, together, root_t);
  PagedBatch batch;
  batch.shared_prefix = GENERATE(0, 1) * prompt;
  CAPTURE(batch.shared_prefix);
  std::vector<Index> ids;
  for (const Index own : {0, 70, 1}) {  // forks with tokens of their own, and a sequence of its own
    const Index a = alone.fork(root_a), t = together.fork(root_t);
    const Matrix<float> x = headwise_test::random_matrix<float>(own, d_model, rng);
    decode_paged(layer, x, alone, a), decode_paged(layer, x, together, t);
    ids.push_back(a);
    batch.rows.push_back({t, own == 70 ? 5 : 1, true});
  }
  const Index loner_a = alone.add_sequence(), loner_t = together.add_sequence();
  const Matrix<float> loner = headwise_test::random_matrix<float>(100, d_model, rng);
  decode_paged(layer, loner, alone, loner_a), decode_paged(layer, loner, together, loner_t);
  ids.push_back(loner_a);
  batch.rows.push_back({loner_t, 2, false});
  Index total = 0;
  for (const BatchRows& r : batch.rows) total += r.tokens;
  const Matrix<float> x = headwise_test::random_matrix<float>(total, d_model, rng);
  const Matrix<float> y = decode_paged(layer, x, together, batch);
  for (std::size_t i = 0, row = 0; i < ids.size(); row += static_cast<std::size_t>(batch.rows[i].tokens), ++i) {
    CAPTURE(i);
    const Index m = batch.rows[i].tokens;
    const Matrix<float> expected = decode_paged(layer, x.middleRows(static_cast<Index>(row), m), alone, ids[i]);
    CHECK_THAT(headwise_test::as_double(y.middleRows(static_cast<Index>(row), m)), IsExactly(expected));
    CHECK(together.size(batch.rows[i].sequence) == alone.size(ids[i]));
  }
  // Refused, changing nothing: a sequence twice, rows that do not add up.
  PagedBatch twice;
  twice.rows = {{loner_t, 1, false}, {loner_t, 1, false}};
  CHECK_THROWS_WITH(decode_paged(layer, x.topRows(2), together, twice), Contains("is in the batch twice"));
  CHECK_THROWS_WITH(decode_paged(layer, x.topRows(3), together, batch), Contains("rows of x are left for it"));
  PagedBatch huge;
  huge.rows = {{loner_t, Index(1) << 62, false}, {ids[0], Index(1) << 62, false}};
  CHECK_THROWS_WITH(decode_paged(layer, x.topRows(0), together, huge), Contains("rows of x are left for it"));
  CHECK(together.size(loner_t) == 102);
  // A refused batch gives back a block one of its sequences copied on write.
  PagedKvCache<float> small = make_paged_cache(layer, (prompt + 31) / 32 + 1, 32);
  const Index r = small.add_sequence();
  decode_paged(layer, first, small, r);  // every block but one, the last partly filled
  const Index f = small.fork(r), g = small.add_sequence();
  const std::vector<Index> table = small.block_table(f);
  PagedBatch greedy;
  greedy.rows = {{f, 1, false}, {g, 40, false}};  // f copies the shared block (the last free one), g finds none
  CHECK_THROWS_WITH(decode_paged(layer, headwise_test::random_matrix<float>(41, d_model, rng), small, greedy), Contains("free blocks"));
  CHECK(small.block_table(f) == table);
  CHECK(small.free_blocks() == 1);
  CHECK(small.references(table.back()) == 2);
}

TEST_CASE("paged cache: restore after a truncation that let a block go keeps it from others, written-over tokens and "
          "views past what blocks hold are refused", "[paged][errors]") {
  const Index G = 1, d = 8, B = KvBlocks<float>::lanes;
  PagedKvCache<float> pool(shape_of<float>(4, B, G, d));
  const auto rows = [&](float value, Index m) { return Matrix<float>::Constant(m, G * d, value); };
  const Index a = pool.add_sequence(), b = pool.add_sequence();
  pool.append(a, rows(1, B + 1), rows(1, B + 1));  // two blocks, the second holding one token
  const auto saved = pool.save(a);
  pool.truncate(a, B);                             // lets the second block go
  CHECK(pool.free_blocks() == 3);
  pool.restore(saved);                             // takes it back: it must leave the free list
  CHECK(pool.free_blocks() == 2);
  CHECK(pool.size(a) == B + 1);
  pool.append(b, rows(7, 2 * B), rows(7, 2 * B));  // the two free blocks, not a's
  CHECK(pool.sequence(a).key(0, B, 0) == 1.0f);
  CHECK(pool.free_blocks() == 0);
  // A truncation, then an append into the same block, writes over a saved token: refused.
  const auto again = pool.save(a);
  pool.truncate(a, B / 2);
  pool.append(a, rows(3, 1), rows(3, 1));
  CHECK_THROWS_WITH(pool.restore(again), Contains("token " + std::to_string(B / 2) + " of sequence 0") && Contains("written over"));
  CHECK(pool.size(a) == B / 2 + 1);  // unchanged by the refusal
  // A saved block handed to another sequence and written there: refused.
  PagedKvCache<float> small(shape_of<float>(2, B, G, d));
  const Index c = small.add_sequence(), e = small.add_sequence();
  small.append(c, rows(1, B + 1), rows(1, B + 1));
  const auto before = small.save(c);
  small.truncate(c, B);
  small.append(e, rows(5, 1), rows(5, 1));
  CHECK_THROWS_WITH(small.restore(before), Contains("token " + std::to_string(B) + " of sequence 0") && Contains("written over"));
  // A view of a table reads no more tokens than its blocks hold for some sequence.
  PagedKvCache<float> views(shape_of<float>(3, B, G, d));
  const Index f = views.add_sequence(), gone = views.add_sequence();
  views.append(f, rows(2, 5), rows(2, 5));
  views.append(gone, rows(4, B), rows(4, B));
  const std::vector<Index> table = views.block_table(f);
  CHECK(views.blocks(table, 5).size() == 5);
  CHECK_THROWS_WITH(views.blocks(table, 6), Contains("entry 0 reads 6 tokens of block " + std::to_string(table[0]) + ", which holds 5"));
  views.free(gone);
  views.truncate(f, 0);
  views.append(f, rows(2, 5), rows(2, 5));  // the freed sequence's block may hold its old keys past these 5
  CHECK_THROWS_WITH(views.blocks(views.block_table(f), B), Contains("which holds 5"));
}

TEST_CASE("paged cache: what does not fit is refused by name, changing nothing", "[paged][errors]") {
  std::mt19937 rng(16);
  const Index G = 2, d = 16, B = 32, W = KvBlocks<float>::lanes;
  CHECK_THROWS_WITH(PagedKvCache<float>(shape_of<float>(4, W + 1, G, d)), Contains("multiple of the kernel's panel width"));
  CHECK_THROWS_WITH(PagedKvCache<float>(shape_of<float>(0, B, G, d)), Contains("blocks must be > 0"));
  CHECK_THROWS_WITH(PagedKvCache<double>(shape_of<double>(4, B, G, d, KvStorage::bf16)), Contains("float32 layers"));
  PagedKvCache<float> pool(shape_of<float>(4, B, G, d));
  const Matrix<float> k = headwise_test::random_matrix<float>(200, G * d, rng);
  const Index s = pool.add_sequence();
  pool.append(s, k.topRows(40), k.topRows(40));
  CHECK_THROWS_WITH(pool.append(s, k, k), Contains("needs 6 free blocks") && Contains("the pool has 2 of 4"));
  Matrix<float> bad = k.topRows(3);
  bad(1, 5) = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(pool.append(s, bad, bad), Contains("position 41") && Contains("not finite"));
  CHECK(pool.size(s) == 40);
  CHECK(pool.free_blocks() == 2);
  const Index gone = pool.add_sequence();
  pool.free(gone);
  CHECK_THROWS_WITH(pool.fork(gone), Contains("sequence 1 was freed"));
  CHECK_THROWS_WITH(pool.size(7), Contains("no sequence 7"));
  CHECK_THROWS_WITH(pool.blocks({0, 9}, 40), Contains("entry 1 is block 9, outside the pool's [0, 4)"));
  CHECK_THROWS_WITH(pool.blocks({0, 3}, 40), Contains("entry 1 is block 3, which no sequence holds"));
  CHECK_THROWS_WITH(pool.blocks({0}, 40), Contains("40 tokens do not fit in a table of 1 blocks"));
  // A batch whose sequences disagree.
  PagedKvCache<float> wide(shape_of<float>(4, B, G, 2 * d)), narrow(shape_of<float>(4, B, G, d, KvStorage::bf16)),
      fewer(shape_of<float>(4, B, 1, d));
  const Index w = wide.add_sequence(), nr = narrow.add_sequence(), f = fewer.add_sequence();
  const auto two = [&](const KvBlocks<float>& second, Index width) {
    AttentionBatch<float> batch;
    batch.sequences.emplace_back(Matrix<float>::Zero(1, 4 * d), pool.sequence(s));
    batch.sequences.emplace_back(Matrix<float>::Zero(1, width), second);
    return batch;
  };
  AttentionCall call;
  call.heads = {4, G};
  CHECK_THROWS_WITH(attend(two(wide.sequence(w), 8 * d), call), Contains("sequence 1 holds heads of d_head 32"));
  CHECK_THROWS_WITH(attend(two(narrow.sequence(nr), 4 * d), call), Contains("sequence 1 stores keys and values BF16"));
  CHECK_THROWS_WITH(attend(two(fewer.sequence(f), 4 * d), call), Contains("sequence 1 holds 1 key/value heads"));
  AttentionCall no_keys = call;
  no_keys.tiles.keys = 0;
  CHECK_THROWS_WITH(attend(two(pool.sequence(s), 4 * d), no_keys), Contains("tile sizes must be > 0"));
  // A shared prefix: a sharer holding other blocks, and options that depend on the query's position.
  const Index t = pool.add_sequence();
  pool.append(t, k.topRows(40), k.topRows(40));
  AttentionBatch<float> shared;
  shared.shared_prefix = 32;
  shared.sequences.emplace_back(Matrix<float>::Zero(1, 4 * d), pool.sequence(s), true);
  shared.sequences.emplace_back(Matrix<float>::Zero(1, 4 * d), pool.sequence(t), true);
  CHECK_THROWS_WITH(attend(shared, call), Contains("sequence 1 shares_prefix but holds other blocks"));
  AttentionOptions windowed;
  windowed.window = 8;
  call.options = &windowed;
  CHECK_THROWS_WITH(attend(shared, call), Contains("not with a window"));
  // A layer refuses a pool of another storage or shape.
  const MultiHeadAttention<float> layer = headwise_test::random_layer<float>(4 * d, 4, G, rng);
  const Index u = narrow.add_sequence();
  CHECK_THROWS_WITH(decode_paged(layer, Matrix<float>::Zero(1, 4 * d), narrow, u), Contains("the pool stores keys and values BF16"));
  CHECK_THROWS_WITH(decode_paged(layer, Matrix<float>::Zero(1, 4 * d), wide, w), Contains("the pool holds 2 heads of keys 32"));
}
