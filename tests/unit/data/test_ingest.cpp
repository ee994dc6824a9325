#include <gtest/gtest.h>

#include <fstream>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/ingest.hpp"

using namespace fnvlp::data;

namespace {

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/fnvlp_ingest_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::map<int64_t, std::string> reasons(const IngestResult& r) {
  std::map<int64_t, std::string> out;
  for (const auto& rej : r.rejects) out[rej.record] = rej.reason;
  return out;
}

TEST(Ingest, AlbefRecordsWithBadOnesIsolated) {
  const std::string text =
      "[\n"
      " {\"image\": \"images/a.jpg\", \"caption\": \"A dog.\", \"image_id\": \"a\"},\n"
      " {\"image\": \"images/b.jpg\", \"caption\": },\n"             // 1 malformed
      " {\"image\": \"images/c.jpg\", \"caption\": \"caf\xff\"},\n"  // 2 not UTF-8
      " {\"image\": \"images/d.jpg\"},\n"                            // 3 no caption
      " {\"image\": \"images/e.jpg\", \"caption\": 7},\n"            // 4 wrong type
      " [1, 2],\n"                                                   // 5 not an object
      " {\"image\": \"images/f.jpg\", \"caption\": [\"one\", \"two\"], \"label\": 3},\n"
      " {\"image\": \"images/g.jpg\", \"caption\": \"a \\\"quoted\\\" } bracket\"}\n"
      "]\n";
  const auto r =
      read_input(write_file("albef.json", text), InputFormat::kAlbef, "/root", std::nullopt);
  EXPECT_EQ(r.total_records, 8);
  ASSERT_EQ(r.records.size(), 4u);
  EXPECT_EQ(r.records[0].image_path, "/root/images/a.jpg");
  EXPECT_EQ(r.records[0].caption, "A dog.");
  EXPECT_EQ(r.records[1].record, 6);  // a caption list expands to one entry per caption
  EXPECT_EQ(r.records[2].caption, "two");
  EXPECT_EQ(r.records[2].label, 3);
  EXPECT_EQ(r.records[3].caption, "a \"quoted\" } bracket");
  const auto why = reasons(r);
  EXPECT_EQ(why.at(1), "malformed_record");
  EXPECT_EQ(why.at(2), "invalid_utf8");
  EXPECT_EQ(why.at(3), "malformed_record");
  EXPECT_EQ(why.at(4), "malformed_record");
  EXPECT_EQ(why.at(5), "malformed_record");
  for (const auto& rej : r.rejects) EXPECT_NE(rej.source.find("albef.json"), std::string::npos);
}

TEST(Ingest, StructuralDamageIsAFileErrorNamingTheFile) {
  const auto path =
      write_file("broken.json", "[{\"image\": \"a.jpg\", \"caption\": \"x\"} {\"image\"");
  try {
    read_input(path, InputFormat::kAlbef, "", std::nullopt);
    FAIL() << "accepted a broken array";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_input("/nonexistent.json", InputFormat::kAlbef, "", std::nullopt),
               fnvlp::Error);
}

TEST(Ingest, SplitFilterUsesImageIdOrStem) {
  const std::string text =
      "[{\"image\": \"i/a.jpg\", \"caption\": \"x\", \"image_id\": \"a\"},"
      " {\"image\": \"i/b.jpg\", \"caption\": \"y\"},"
      " {\"image\": \"i/c.jpg\", \"caption\": \"z\", \"image_id\": 17}]";
  const auto split_path = write_file("splits.json", "{\"train\": [\"a\", \"b\"], \"val\": [17]}");
  const auto train = read_split_ids(split_path, "train");
  const auto r = read_input(write_file("split.json", text), InputFormat::kAlbef, "", train);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.filtered_by_split, 1);
  const auto val = read_input(write_file("split.json", text), InputFormat::kAlbef, "",
                              read_split_ids(split_path, "val"));
  ASSERT_EQ(val.records.size(), 1u);
  EXPECT_EQ(val.records[0].image_path, "i/c.jpg");
  EXPECT_THROW(read_split_ids(split_path, "test"), fnvlp::Error);
}

TEST(Ingest, CocoCaptions) {
  const std::string text =
      "{\"info\": {}, \"images\": [{\"id\": 5, \"file_name\": \"x5.jpg\"}, {\"id\": 9, "
      "\"file_name\": "
      "\"x9.jpg\"}], \"annotations\": [{\"image_id\": 9, \"id\": 1, \"caption\": \"nine\"},"
      " {\"image_id\": 4, \"id\": 2, \"caption\": \"unknown image\"},"
      " {\"image_id\": 5, \"id\": 3, \"caption\": \"five\"}]}";
  const auto r = read_input(write_file("coco.json", text), InputFormat::kCoco, "/c", std::nullopt);
  EXPECT_EQ(r.total_records, 3);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].image_path, "/c/x9.jpg");
  EXPECT_EQ(r.records[1].caption, "five");
  EXPECT_EQ(reasons(r).at(1), "malformed_record");
}

// A float where an integer belongs is a malformed record, not a cast: nlohmann casts a float to an
// integer without a range check (undefined for 7.8e108, found by tests/fuzz/fuzz_ingest).
TEST(Ingest, NonIntegerIdsAndLabelsAreMalformed) {
  const std::string coco =
      "{\"images\": [{\"id\": 5, \"file_name\": \"x5.jpg\"}],"
      " \"annotations\": [{\"image_id\": 7.77778e+108, \"caption\": \"huge\"},"
      " {\"image_id\": 5.0, \"caption\": \"float\"},"
      " {\"image_id\": 5, \"caption\": \"five\"}]}";
  const auto r =
      read_input(write_file("coco_float.json", coco), InputFormat::kCoco, "", std::nullopt);
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].caption, "five");
  ASSERT_EQ(r.rejects.size(), 2u);
  for (const auto& rej : r.rejects) {
    EXPECT_EQ(rej.reason, "malformed_record");
    EXPECT_NE(rej.detail.find("expected an integer"), std::string::npos) << rej.detail;
  }
  // An image id that is not an integer breaks the whole images table: a file error.
  const auto bad_images =
      write_file("coco_float_images.json",
                 "{\"images\": [{\"id\": 1e300, \"file_name\": \"x.jpg\"}], \"annotations\": []}");
  try {
    read_input(bad_images, InputFormat::kCoco, "", std::nullopt);
    FAIL() << "accepted a float image id";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("images[0]"), std::string::npos) << e.what();
  }
  const std::string albef =
      "[{\"image\": \"a.jpg\", \"caption\": \"x\", \"label\": 3e12},"
      " {\"image\": \"b.jpg\", \"caption\": \"y\", \"label\": 4294967296},"
      " {\"image\": \"c.jpg\", \"caption\": \"z\", \"image_id\": 18446744073709551615}]";
  const auto a =
      read_input(write_file("albef_labels.json", albef), InputFormat::kAlbef, "", std::nullopt);
  ASSERT_EQ(a.records.size(), 1u);  // labels must fit int32; large integer ids stay exact
  EXPECT_EQ(reasons(a).at(0), "malformed_record");
  EXPECT_EQ(reasons(a).at(1), "malformed_record");
}

TEST(Ingest, FlickrTokenLines) {
  const std::string text =
      "1000_a.jpg#0\tA child in pink .\r\n"
      "1000_a.jpg#1\tA girl .\n"
      "no tab here\n"
      "\n"
      "2000_b.jpg#0\tbad \xc3\x28 byte\n"
      "3000_c.jpg#0\tok\n";
  const auto r = read_input(write_file("tokens.txt", text), InputFormat::kFlickrToken, "img",
                            std::unordered_set<std::string>{"1000_a", "2000_b"});
  EXPECT_EQ(r.total_records, 5);  // blank lines are not records
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].image_path, "img/1000_a.jpg");
  EXPECT_EQ(r.records[0].caption, "A child in pink .");
  EXPECT_EQ(r.filtered_by_split, 1);
  const auto why = reasons(r);
  EXPECT_EQ(why.at(2), "malformed_record");
  EXPECT_EQ(why.at(3), "invalid_utf8");
}

TEST(Ingest, RejectLinesRoundTripEvenWithBrokenBytes) {
  Reject r{7, "invalid_utf8", "in.json", "bad \xff byte"};
  const auto back = Reject::from_json_line(r.to_json_line());
  EXPECT_EQ(back.record, 7);
  EXPECT_EQ(back.reason, "invalid_utf8");
  EXPECT_EQ(back.source, "in.json");
}

TEST(Ingest, UnknownFormatIsNamed) {
  EXPECT_THROW(parse_input_format("csv"), fnvlp::Error);
  EXPECT_EQ(parse_input_format("flickr-token"), InputFormat::kFlickrToken);
}

}  // namespace
