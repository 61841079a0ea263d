#include "io/s3/xml_replies.h"

#include <expat.h>

#include <ctime>
#include <memory>

namespace ckpt::s3 {
namespace {

// Deeper documents are refused: S3's replies nest 3 levels, and the tree below is built recursively.
constexpr int kMaxDepth = 16;

// The parsed document: S3's replies are small (bounded by kMaxXmlReplyBytes) and read once, so a tree is simplest.
struct Element {
  std::string name;
  std::string text;
  std::vector<std::unique_ptr<Element>> children;

  const Element* Child(std::string_view child_name) const {
    for (const auto& child : children) {
      if (child->name == child_name) return child.get();
    }
    return nullptr;
  }
  std::string ChildText(std::string_view child_name) const {
    const Element* child = Child(child_name);
    return child ? child->text : std::string();
  }
};

struct TreeBuilder {
  std::unique_ptr<Element> root;
  std::vector<Element*> open;
  bool too_deep = false;
};

void OnStart(void* data, const XML_Char* name, const XML_Char**) {
  auto* builder = static_cast<TreeBuilder*>(data);
  if (builder->open.size() >= kMaxDepth) {
    builder->too_deep = true;
    return;
  }
  auto element = std::make_unique<Element>();
  element->name = name;
  Element* raw = element.get();
  if (builder->open.empty()) {
    builder->root = std::move(element);
  } else {
    builder->open.back()->children.push_back(std::move(element));
  }
  builder->open.push_back(raw);
}

void OnEnd(void* data, const XML_Char*) {
  auto* builder = static_cast<TreeBuilder*>(data);
  if (!builder->too_deep && !builder->open.empty()) builder->open.pop_back();
}

void OnText(void* data, const XML_Char* text, int length) {
  auto* builder = static_cast<TreeBuilder*>(data);
  if (!builder->too_deep && !builder->open.empty()) builder->open.back()->text.append(text, length);
}

// The document's root element, named `root_name`, or kCorrupt.
Result<std::unique_ptr<Element>> Parse(std::string_view body, std::string_view root_name, const std::string& what) {
  if (body.size() > kMaxXmlReplyBytes) {
    return Corrupt(what + ": the reply of " + std::to_string(body.size()) + " bytes is larger than the " +
                   std::to_string(kMaxXmlReplyBytes) + " bytes accepted");
  }
  std::unique_ptr<XML_ParserStruct, void (*)(XML_Parser)> parser(XML_ParserCreate(nullptr), XML_ParserFree);
  if (!parser) return Status(Code::kNoMemory, what + ": cannot make an XML parser");
  TreeBuilder builder;
  XML_SetUserData(parser.get(), &builder);
  XML_SetElementHandler(parser.get(), OnStart, OnEnd);
  XML_SetCharacterDataHandler(parser.get(), OnText);
  if (XML_Parse(parser.get(), body.data(), static_cast<int>(body.size()), XML_TRUE) != XML_STATUS_OK) {
    return Corrupt(what + ": malformed XML in the reply (line " +
                   std::to_string(XML_GetCurrentLineNumber(parser.get())) + ": " +
                   XML_ErrorString(XML_GetErrorCode(parser.get())) + ")");
  }
  if (builder.too_deep) return Corrupt(what + ": the reply's XML nests deeper than " + std::to_string(kMaxDepth));
  if (!builder.root || builder.root->name != root_name) {
    return Corrupt(what + ": expected a <" + std::string(root_name) + "> document, the reply is <" +
                   (builder.root ? builder.root->name : std::string()) + ">");
  }
  return std::move(builder.root);
}

Result<uint64_t> ParseSize(const Element& parent, const std::string& what) {
  std::string text = parent.ChildText("Size");
  bool digits = !text.empty() && text.size() <= 19;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) return Corrupt(what + ": malformed <Size> " + Quoted(text) + " in the listing");
  return std::stoull(text);
}

}  // namespace

int64_t ParseIsoTime(std::string_view text) {
  std::tm parts{};
  std::string copy(text.substr(0, 19));
  if (copy.size() != 19 || strptime(copy.c_str(), "%Y-%m-%dT%H:%M:%S", &parts) != copy.c_str() + 19) return -1;
  return static_cast<int64_t>(timegm(&parts));
}

bool LooksLikeErrorDocument(std::string_view body) {
  size_t start = 0;
  // Past the XML declaration and whitespace to the root element.
  while (start < body.size()) {
    start = body.find('<', start);
    if (start == std::string_view::npos) return false;
    if (body.substr(start, 2) != "<?") break;
    start = body.find("?>", start);
    if (start == std::string_view::npos) return false;
  }
  return body.substr(start, 7) == "<Error>" || body.substr(start, 7) == "<Error ";
}

Result<ErrorDocument> ParseErrorDocument(std::string_view body, const std::string& what) {
  ASSIGN_OR_RETURN(auto root, Parse(body, "Error", what));
  return ErrorDocument{root->ChildText("Code"), root->ChildText("Message"), root->ChildText("Resource"),
                       root->ChildText("RequestId")};
}

Result<std::string> ParseInitiateResult(std::string_view body, const std::string& what) {
  ASSIGN_OR_RETURN(auto root, Parse(body, "InitiateMultipartUploadResult", what));
  std::string upload_id = root->ChildText("UploadId");
  if (upload_id.empty()) return Corrupt(what + ": the reply has no <UploadId>");
  return upload_id;
}

Result<std::string> ParseCompleteResult(std::string_view body, const std::string& what) {
  ASSIGN_OR_RETURN(auto root, Parse(body, "CompleteMultipartUploadResult", what));
  if (root->Child("ETag") == nullptr) return Corrupt(what + ": the reply has no <ETag>");
  return root->ChildText("ETag");
}

Result<ObjectPage> ParseListObjectsResult(std::string_view body, const std::string& what) {
  ASSIGN_OR_RETURN(auto root, Parse(body, "ListBucketResult", what));
  ObjectPage page;
  for (const auto& child : root->children) {
    if (child->name != "Contents") continue;
    ASSIGN_OR_RETURN(uint64_t size, ParseSize(*child, what));
    page.objects.push_back({child->ChildText("Key"), size, ParseIsoTime(child->ChildText("LastModified"))});
  }
  page.truncated = root->ChildText("IsTruncated") == "true";
  page.next_continuation_token = root->ChildText("NextContinuationToken");
  if (page.truncated && page.next_continuation_token.empty()) {
    return Corrupt(what + ": a truncated listing without <NextContinuationToken>");
  }
  return page;
}

Result<UploadPage> ParseListUploadsResult(std::string_view body, const std::string& what) {
  ASSIGN_OR_RETURN(auto root, Parse(body, "ListMultipartUploadsResult", what));
  UploadPage page;
  for (const auto& child : root->children) {
    if (child->name != "Upload") continue;
    page.uploads.push_back(
        {child->ChildText("Key"), child->ChildText("UploadId"), ParseIsoTime(child->ChildText("Initiated"))});
  }
  page.truncated = root->ChildText("IsTruncated") == "true";
  page.next_key_marker = root->ChildText("NextKeyMarker");
  page.next_upload_id_marker = root->ChildText("NextUploadIdMarker");
  if (page.truncated && page.next_key_marker.empty()) {
    return Corrupt(what + ": a truncated upload listing without <NextKeyMarker>");
  }
  return page;
}

}  // namespace ckpt::s3
