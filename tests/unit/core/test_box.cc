#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/core/box.h"

namespace ckpt::runtime {
namespace {

Shape RandomShape(std::mt19937_64* rng, size_t ndim, uint64_t max_extent) {
  Shape shape(ndim);
  for (auto& extent : shape) extent = 1 + (*rng)() % max_extent;
  return shape;
}

// A random box inside `outer`, at least one element in every dimension.
Box RandomBoxInside(std::mt19937_64* rng, const Box& outer) {
  Box box = outer;
  for (size_t d = 0; d < outer.ndim(); ++d) {
    const uint64_t begin = (*rng)() % outer.shape[d];
    box.offset[d] = outer.offset[d] + begin;
    box.shape[d] = 1 + (*rng)() % (outer.shape[d] - begin);
  }
  return box;
}

// The index, within `box`'s own row-major order, of global coordinates `point`.
uint64_t FlatIndex(const Box& box, const Shape& point) {
  uint64_t index = 0;
  for (size_t d = 0; d < box.ndim(); ++d) index = index * box.shape[d] + (point[d] - box.offset[d]);
  return index;
}

// Calls fn(point) for every element of `box` in row-major order.
template <typename Fn>
void ForEachPoint(const Box& box, Fn&& fn) {
  if (box.empty()) return;
  Shape point = box.offset;
  while (true) {
    fn(point);
    size_t d = box.ndim();
    while (d > 0) {
      --d;
      if (++point[d] < box.offset[d] + box.shape[d]) break;
      point[d] = box.offset[d];
      if (d == 0) return;
    }
    if (box.ndim() == 0) return;
  }
}

TEST(BoxTest, VolumeOfScalarIsOne) {
  EXPECT_EQ(Volume({}), 1u);
  EXPECT_EQ(Box{}.volume(), 1u);
  EXPECT_FALSE(Box{}.empty());
}

TEST(BoxTest, VolumeIsProductOfExtents) {
  EXPECT_EQ(Volume({3, 4, 5}), 60u);
  EXPECT_TRUE((Box{{0, 0}, {0, 7}}.empty()));
}

TEST(BoxTest, VolumeFitsDetectsOverflow) {
  EXPECT_TRUE(VolumeFits({1ull << 31, 1ull << 31}, 2));
  EXPECT_FALSE(VolumeFits({1ull << 31, 1ull << 31}, 4));
  EXPECT_FALSE(VolumeFits({1ull << 32, 1ull << 32}, 1));
  EXPECT_TRUE(VolumeFits({1ull << 40, 0, 1ull << 40}, 8));
  EXPECT_TRUE(VolumeFits({}, 8));
}

TEST(BoxTest, ToStringShowsHalfOpenRanges) {
  EXPECT_EQ((Box{{0, 8}, {4, 8}}.ToString()), "[0:4, 8:16]");
  EXPECT_EQ(Box{}.ToString(), "[]");
}

TEST(BoxTest, OrderIsByOffsetThenShape) {
  const Box a{{0, 4}, {2, 2}};
  const Box b{{1, 0}, {1, 1}};
  const Box c{{0, 4}, {3, 1}};
  EXPECT_LT(a, b);
  EXPECT_LT(a, c);
  EXPECT_FALSE(b < a);
  EXPECT_FALSE(a < a);
}

TEST(BoxTest, ContainsChecksEveryDimension) {
  const Box outer{{2, 2}, {4, 4}};
  EXPECT_TRUE(Contains(outer, Box{{2, 2}, {4, 4}}));
  EXPECT_TRUE(Contains(outer, Box{{3, 5}, {1, 1}}));
  EXPECT_FALSE(Contains(outer, Box{{1, 2}, {2, 2}}));
  EXPECT_FALSE(Contains(outer, Box{{5, 2}, {2, 2}}));
  EXPECT_FALSE(Contains(outer, Box{{2}, {2}}));
}

TEST(BoxTest, ContainsDoesNotWrapOnHugeOffsets) {
  const Box whole = WholeBox({16});
  EXPECT_FALSE(Contains(whole, Box{{UINT64_MAX - 1}, {4}}));
  EXPECT_FALSE(Contains(whole, Box{{8}, {UINT64_MAX}}));
}

TEST(BoxTest, IntersectReturnsCommonPart) {
  const auto common = Intersect(Box{{0, 0}, {4, 8}}, Box{{2, 6}, {4, 4}});
  ASSERT_TRUE(common.has_value());
  EXPECT_EQ(*common, (Box{{2, 6}, {2, 2}}));
}

TEST(BoxTest, IntersectOfDisjointOrTouchingBoxesIsNone) {
  EXPECT_FALSE(Intersect(Box{{0, 0}, {4, 4}}, Box{{4, 0}, {4, 4}}).has_value());
  EXPECT_FALSE(Intersect(Box{{0, 0}, {4, 4}}, Box{{0, 9}, {4, 4}}).has_value());
  EXPECT_FALSE(Intersect(Box{{0}, {0}}, Box{{0}, {4}}).has_value());
  EXPECT_FALSE(Intersect(Box{{0}, {4}}, Box{{0, 0}, {4, 4}}).has_value());
}

TEST(BoxTest, IntersectOfScalarsIsTheScalar) {
  const auto common = Intersect(Box{}, Box{});
  ASSERT_TRUE(common.has_value());
  EXPECT_EQ(common->ndim(), 0u);
}

TEST(DecomposeFlatRangeTest, EmptyRangeGivesNoPieces) {
  EXPECT_TRUE(DecomposeFlatRange(WholeBox({4, 4}), 5, 5).empty());
}

TEST(DecomposeFlatRangeTest, RangePastTheBoxGivesNoPieces) {
  EXPECT_TRUE(DecomposeFlatRange(WholeBox({4, 4}), 0, 17).empty());
}

TEST(DecomposeFlatRangeTest, ScalarIsOnePiece) {
  const auto pieces = DecomposeFlatRange(Box{}, 0, 1);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].range_offset, 0u);
}

TEST(DecomposeFlatRangeTest, WholeBoxIsOnePiece) {
  const Box box{{2, 0, 4}, {3, 4, 5}};
  const auto pieces = DecomposeFlatRange(box, 0, box.volume());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].box, box);
}

TEST(DecomposeFlatRangeTest, SplitsIntoLeadingMiddleAndTrailingPieces) {
  // 4x5 box, elements 3..17: [0, 3:5], rows 1..2 whole, [3, 0:3].
  const auto pieces = DecomposeFlatRange(WholeBox({4, 5}), 3, 18);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].box, (Box{{0, 3}, {1, 2}}));
  EXPECT_EQ(pieces[0].range_offset, 0u);
  EXPECT_EQ(pieces[1].box, (Box{{1, 0}, {2, 5}}));
  EXPECT_EQ(pieces[1].range_offset, 2u);
  EXPECT_EQ(pieces[2].box, (Box{{3, 0}, {1, 3}}));
  EXPECT_EQ(pieces[2].range_offset, 12u);
}

// Checks every property DecomposeFlatRange promises for one range.
void ExpectValidDecomposition(const Box& box, uint64_t start, uint64_t end) {
  SCOPED_TRACE(box.ToString() + " range " + std::to_string(start) + ".." + std::to_string(end));
  const auto pieces = DecomposeFlatRange(box, start, end);
  EXPECT_LE(pieces.size(), std::max<size_t>(1, 2 * box.ndim() - 1));
  uint64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const FlatPiece& piece = pieces[i];
    ASSERT_FALSE(piece.box.empty());
    ASSERT_TRUE(Contains(box, piece.box)) << piece.box.ToString();
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(Intersect(piece.box, pieces[j].box).has_value());
    uint64_t expected = start + piece.range_offset;
    ForEachPoint(piece.box, [&](const Shape& point) { EXPECT_EQ(FlatIndex(box, point), expected++); });
    total += piece.box.volume();
  }
  EXPECT_EQ(total, end - start);
}

TEST(DecomposeFlatRangeTest, EveryRangeOfSmallBoxesIsExact) {
  std::mt19937_64 rng(7);
  for (size_t ndim = 1; ndim <= 4; ++ndim) {
    for (int trial = 0; trial < 25; ++trial) {
      const Box box{RandomShape(&rng, ndim, 5), RandomShape(&rng, ndim, ndim < 4 ? 4 : 3)};
      for (uint64_t start = 0; start <= box.volume(); ++start) {
        for (uint64_t end = start; end <= box.volume(); ++end) ExpectValidDecomposition(box, start, end);
      }
    }
  }
}

TEST(DecomposeFlatRangeTest, RandomRangesOfLargerBoxesAreExact) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t ndim = 1 + rng() % 4;
    const Box box{RandomShape(&rng, ndim, 100), RandomShape(&rng, ndim, 9)};
    uint64_t a = rng() % (box.volume() + 1);
    uint64_t b = rng() % (box.volume() + 1);
    if (a > b) std::swap(a, b);
    ExpectValidDecomposition(box, a, b);
  }
}

// Copies element by element, the obvious way, for comparison.
void NaiveCopy(const std::vector<char>& src, const Box& src_box, std::vector<char>* dst, const Box& dst_box,
               const Box& region, size_t element_size) {
  ForEachPoint(region, [&](const Shape& point) {
    std::memcpy(dst->data() + FlatIndex(dst_box, point) * element_size,
                src.data() + FlatIndex(src_box, point) * element_size, element_size);
  });
}

TEST(CopyRegionTest, MatchesElementwiseCopyOnRandomBoxes) {
  std::mt19937_64 rng(3);
  for (size_t element_size : {1, 2, 4, 8}) {
    for (size_t ndim = 1; ndim <= 5; ++ndim) {
      for (int trial = 0; trial < 100; ++trial) {
        const Box whole = WholeBox(RandomShape(&rng, ndim, 6));
        const Box src_box = RandomBoxInside(&rng, whole);
        const Box dst_box = RandomBoxInside(&rng, whole);
        const auto overlap = Intersect(src_box, dst_box);
        if (!overlap) continue;
        const Box region = RandomBoxInside(&rng, *overlap);
        std::vector<char> src(src_box.volume() * element_size);
        for (auto& byte : src) byte = static_cast<char>(rng());
        std::vector<char> expected(dst_box.volume() * element_size, 0x5a);
        std::vector<char> actual = expected;
        NaiveCopy(src, src_box, &expected, dst_box, region, element_size);
        CopyRegion(src.data(), src_box, actual.data(), dst_box, region, element_size);
        ASSERT_EQ(actual, expected) << "src " << src_box.ToString() << " dst " << dst_box.ToString() << " region "
                                    << region.ToString() << " element size " << element_size;
      }
    }
  }
}

TEST(CopyRegionTest, ScalarCopiesOneElement) {
  const double src = 2.5;
  double dst = 0;
  CopyRegion(&src, Box{}, &dst, Box{}, Box{}, sizeof src);
  EXPECT_EQ(dst, 2.5);
}

TEST(ForEachRunTest, FullSlabIsOneRun) {
  // Rows 2..5 of a 8x4x6 tensor: both buffers hold the trailing dimensions whole.
  const Box src = WholeBox({8, 4, 6});
  const Box dst{{2, 0, 0}, {3, 4, 6}};
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> runs;
  ForEachRun(src, dst, dst, 4, [&](uint64_t s, uint64_t d, uint64_t n) { runs.emplace_back(s, d, n); });
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], std::make_tuple(uint64_t{2 * 24 * 4}, uint64_t{0}, uint64_t{3 * 24 * 4}));
}

TEST(ForEachRunTest, RunsStopWhereAnInnerDimensionIsCut) {
  // Columns 1..2 of a 3x4 buffer copied into a 3x2 buffer: one run per row, in increasing source order.
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> runs;
  const Box region{{0, 1}, {3, 2}};
  ForEachRun(WholeBox({3, 4}), region, region, 1,
             [&](uint64_t s, uint64_t d, uint64_t n) { runs.emplace_back(s, d, n); });
  const std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> expected = {{1, 0, 2}, {5, 2, 2}, {9, 4, 2}};
  EXPECT_EQ(runs, expected);
}

TEST(ForEachRunTest, EmptyRegionHasNoRuns) {
  int calls = 0;
  const Box region{{0, 0}, {0, 4}};
  ForEachRun(WholeBox({2, 4}), WholeBox({2, 4}), region, 4, [&](uint64_t, uint64_t, uint64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// SingleRunOffset agrees with ForEachRun: the offset of the one run where the region is a single run of the box's
// buffer, nullopt where ForEachRun would give several runs or none.
TEST(SingleRunOffsetTest, AgreesWithForEachRun) {
  const Box box{{4, 0, 0}, {4, 3, 6}};
  const std::vector<Box> regions = {
      box,                     // the whole buffer
      {{5, 0, 0}, {2, 3, 6}},  // whole rows of the first dimension
      {{6, 1, 0}, {1, 2, 6}},  // one index of the first, whole trailing rows
      {{6, 1, 2}, {1, 1, 3}},  // part of one innermost row
      {{6, 1, 2}, {1, 2, 3}},  // parts of two innermost rows: two runs
      {{4, 0, 0}, {2, 3, 5}},  // the innermost dimension cut on every row
      {{5, 0, 0}, {0, 3, 6}},  // empty: no run
  };
  for (const Box& region : regions) {
    std::vector<uint64_t> offsets;
    ForEachRun(region, box, region, 2, [&](uint64_t, uint64_t d, uint64_t) { offsets.push_back(d); });
    const std::optional<uint64_t> expected = offsets.size() == 1 ? std::optional<uint64_t>(offsets[0]) : std::nullopt;
    EXPECT_EQ(SingleRunOffset(box, region, 2), expected) << region.ToString();
  }
  EXPECT_EQ(SingleRunOffset(Box{}, Box{}, 4), std::optional<uint64_t>(0));  // a scalar is one run
}

// RunsOf agrees with ForEachRun: as many runs, each of the bytes it says.
TEST(RunsOfTest, AgreesWithForEachRun) {
  const Box box{{4, 0, 0}, {4, 3, 6}};
  const std::vector<Box> regions = {
      box,                     // the whole buffer: one run
      {{5, 0, 0}, {2, 3, 6}},  // whole rows of the first dimension: one run
      {{6, 1, 2}, {1, 2, 3}},  // parts of two innermost rows
      {{4, 0, 0}, {2, 3, 5}},  // the innermost dimension cut on every row: six runs
      {{4, 1, 0}, {3, 2, 6}},  // whole innermost rows, the middle dimension cut: three runs of two rows
  };
  for (const Box& region : regions) {
    std::vector<uint64_t> lengths;
    ForEachRun(region, box, region, 2, [&](uint64_t, uint64_t, uint64_t n) { lengths.push_back(n); });
    const RunShape shape = RunsOf(box, region, 2);
    EXPECT_EQ(shape.runs, lengths.size()) << region.ToString();
    for (uint64_t n : lengths) EXPECT_EQ(shape.run_bytes, n) << region.ToString();
  }
  EXPECT_EQ(RunsOf(Box{}, Box{}, 4).runs, 1u);  // a scalar is one run of its element
  EXPECT_EQ(RunsOf(Box{}, Box{}, 4).run_bytes, 4u);
}

}  // namespace
}  // namespace ckpt::runtime
