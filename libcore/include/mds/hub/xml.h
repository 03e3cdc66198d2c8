// The small XML reader the S3 client needs: the answers of ListObjectsV2, ListParts,
// CreateMultipartUpload, CompleteMultipartUpload and S3's <Error> documents. Elements, their text,
// the five predefined entities and character references, CDATA, comments, processing instructions
// and a DOCTYPE-free prolog; attributes are read past and dropped (S3 answers carry only xmlns).
// Namespaces are kept as written ("ListBucketResult", not "{...}ListBucketResult"). Depth and size
// are bounded; malformed input is an mds::Error naming `what` and the byte offset.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mds::hub {

struct XmlElement {
    std::string name;
    std::string text;  // the element's own character data, concatenated (children's text not included)
    std::vector<XmlElement> children;

    // The first child called `name`, or nullptr.
    const XmlElement* child(std::string_view child_name) const;
    // Its text, or `fallback` when there is no such child.
    std::string child_text(std::string_view child_name, const std::string& fallback = {}) const;
    std::vector<const XmlElement*> all(std::string_view child_name) const;
};

// Throws mds::Error("<what>: <problem> at byte N") for malformed documents, a second root element,
// more than 64 levels of nesting or undefined entities.
XmlElement parse_xml(std::string_view text, const std::string& what);

// Escapes &, <, >, " and ' for element text.
std::string xml_escape(std::string_view text);

}  // namespace mds::hub
