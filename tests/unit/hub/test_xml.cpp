// The S3 client's XML reader (hub/xml.h): S3's answer documents as AWS documents them, entities,
// character references, CDATA, comments and the declaration; malformed input as mds::Error naming
// the document and the byte offset.
#include <doctest/doctest.h>

#include <string>

#include "mds/hub/xml.h"
#include "mds/util/error.h"

using namespace mds::hub;

namespace {

// The message parse_xml throws for `text`, or "" when it parses.
std::string xml_error(const std::string& text) {
    try {
        (void)parse_xml(text, "doc");
    } catch (const mds::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("xml: ListObjectsV2 answer, several Contents, &quot; in ETags, truncated with a continuation token") {
    const std::string doc =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>mds-runs</Name>"
        "<Prefix>run1/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
        "<ContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</ContinuationToken>"
        "<NextContinuationToken>1w41l63U0xa8q7smH50vCxyTQqdxo69O3EmK28Bi5PcROI4wI/EyIJg==</NextContinuationToken>"
        "<Contents><Key>run1/ckpt/iter_0000100/model_optim_rng.pt</Key><LastModified>2024-05-01T12:00:00.000Z</LastModified>"
        "<ETag>&quot;599bab3ed2c697f1d26842727561fd94&quot;</ETag><ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>"
        "<Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>run1/logs/events.out.tfevents.1714564800.node1</Key><LastModified>2024-05-01T12:01:00.000Z</LastModified>"
        "<ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag><Size>2315255808</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>run1/a &amp; b &lt;c&gt; &apos;d&apos;.txt</Key><LastModified>2024-05-01T12:02:00.000Z</LastModified>"
        "<ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag><Size>0</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "</ListBucketResult>\n";
    const XmlElement r = parse_xml(doc, "listing");
    CHECK(r.name == "ListBucketResult");  // the xmlns attribute is dropped, the name kept as written
    CHECK(r.child_text("Name") == "mds-runs");
    CHECK(r.child_text("IsTruncated") == "true");
    CHECK(r.child_text("NextContinuationToken") == "1w41l63U0xa8q7smH50vCxyTQqdxo69O3EmK28Bi5PcROI4wI/EyIJg==");
    CHECK(r.child_text("KeyCount") == "3");
    const auto contents = r.all("Contents");
    REQUIRE(contents.size() == 3);
    CHECK(contents[0]->child_text("Key") == "run1/ckpt/iter_0000100/model_optim_rng.pt");
    CHECK(contents[0]->child_text("ETag") == "\"599bab3ed2c697f1d26842727561fd94\"");
    CHECK(contents[0]->child_text("Size") == "1048576");
    CHECK(contents[1]->child_text("ETag") == "\"3858f62230ac3c915f300c664312c11f-9\"");
    CHECK(contents[1]->child_text("Size") == "2315255808");
    CHECK(contents[2]->child_text("Key") == "run1/a & b <c> 'd'.txt");
    CHECK(contents[2]->child_text("ETag") == "\"d41d8cd98f00b204e9800998ecf8427e\"");
    CHECK(contents[2]->child_text("Size") == "0");
    // child() finds the first; all() keeps document order; the root's own text is only what lies between
    // its children (here nothing).
    CHECK(r.child("Contents") == contents[0]);
    CHECK(r.text.empty());
    CHECK(r.child("NoSuch") == nullptr);
    CHECK(r.child_text("NoSuch") == "");
    CHECK(r.child_text("NoSuch", "fallback") == "fallback");
    CHECK(r.child_text("Name", "fallback") == "mds-runs");
    CHECK(r.all("NoSuch").empty());
}

TEST_CASE("xml: last ListObjectsV2 page, empty listing") {
    const XmlElement last = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
        "</ListBucketResult>",
        "listing");
    CHECK(last.child_text("IsTruncated") == "false");
    CHECK(last.all("Contents").empty());
    REQUIRE(last.child("Prefix") != nullptr);
    CHECK(last.child("Prefix")->text.empty());
    CHECK(last.child_text("NextContinuationToken", "none") == "none");
    // MinIO's self-closing empty elements.
    const XmlElement minio = parse_xml("<ListBucketResult><Name>b</Name><Prefix/><IsTruncated>false</IsTruncated></ListBucketResult>", "x");
    REQUIRE(minio.child("Prefix") != nullptr);
    CHECK(minio.child("Prefix")->text.empty());
    CHECK(minio.child("Prefix")->children.empty());
}

TEST_CASE("xml: ListParts answer (AWS's example, pretty-printed), truncated") {
    const std::string doc = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>example-bucket</Bucket>
  <Key>example-object</Key>
  <UploadId>XXBsb2FkIElEIGZvciBlbHZpbmcncyVcdS1tb3ZpZS5tMnRzEEEwbG9hZA</UploadId>
  <Initiator>
      <ID>arn:aws:iam::111122223333:user/some-user-11116a31-17b5-4fb7-9df5-b288870f11xx</ID>
      <DisplayName>umat-user-11116a31-17b5-4fb7-9df5-b288870f11xx</DisplayName>
  </Initiator>
  <Owner>
    <ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>
    <DisplayName>someName</DisplayName>
  </Owner>
  <StorageClass>STANDARD</StorageClass>
  <PartNumberMarker>1</PartNumberMarker>
  <NextPartNumberMarker>3</NextPartNumberMarker>
  <MaxParts>2</MaxParts>
  <IsTruncated>true</IsTruncated>
  <Part>
    <PartNumber>2</PartNumber>
    <LastModified>2010-11-10T20:48:34.000Z</LastModified>
    <ETag>"7778aef83f66abc1fa1e8477f296d394"</ETag>
    <Size>10485760</Size>
  </Part>
  <Part>
    <PartNumber>3</PartNumber>
    <LastModified>2010-11-10T20:48:33.000Z</LastModified>
    <ETag>"aaaa18db4cc2f85cedef654fccc4a4x8"</ETag>
    <Size>10485760</Size>
  </Part>
</ListPartsResult>
)";
    const XmlElement r = parse_xml(doc, "parts");
    CHECK(r.name == "ListPartsResult");
    CHECK(r.child_text("UploadId") == "XXBsb2FkIElEIGZvciBlbHZpbmcncyVcdS1tb3ZpZS5tMnRzEEEwbG9hZA");
    CHECK(r.child_text("IsTruncated") == "true");
    CHECK(r.child_text("NextPartNumberMarker") == "3");
    REQUIRE(r.child("Initiator") != nullptr);
    CHECK(r.child("Initiator")->child_text("DisplayName") == "umat-user-11116a31-17b5-4fb7-9df5-b288870f11xx");
    const auto parts = r.all("Part");
    REQUIRE(parts.size() == 2);
    CHECK(parts[0]->child_text("PartNumber") == "2");
    CHECK(parts[0]->child_text("ETag") == "\"7778aef83f66abc1fa1e8477f296d394\"");
    CHECK(parts[1]->child_text("PartNumber") == "3");
    CHECK(parts[1]->child_text("Size") == "10485760");
    // The indentation between children is the parent's own text; a child's text is exactly its content.
    CHECK(r.text.find_first_not_of(" \n") == std::string::npos);
    CHECK_FALSE(r.text.empty());
    CHECK(parts[0]->text.find_first_not_of(" \n") == std::string::npos);
}

TEST_CASE("xml: InitiateMultipartUpload, CompleteMultipartUpload and Error answers") {
    const XmlElement init = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Bucket>example-bucket</Bucket><Key>example-object</Key>"
        "<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId></InitiateMultipartUploadResult>",
        "init");
    CHECK(init.name == "InitiateMultipartUploadResult");
    CHECK(init.child_text("UploadId") == "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
    CHECK(init.child_text("Key") == "example-object");

    const XmlElement done = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Location>https://example-bucket.s3.us-east-1.amazonaws.com/Example-Object</Location><Bucket>example-bucket</Bucket>"
        "<Key>Example-Object</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag></CompleteMultipartUploadResult>",
        "complete");
    CHECK(done.child_text("ETag") == "\"3858f62230ac3c915f300c664312c11f-9\"");

    const XmlElement err = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The resource you requested does not exist"
        "</Message><Resource>/mybucket/myfoto.jpg</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>",
        "error");
    CHECK(err.name == "Error");
    CHECK(err.child_text("Code") == "NoSuchKey");
    CHECK(err.child_text("Message") == "The resource you requested does not exist");

    // SignatureDoesNotMatch carries the string to sign and canonical request, with &#10; for line ends.
    const XmlElement sig = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we "
        "calculated does not match the signature you provided. Check your key and signing method.</Message>"
        "<AWSAccessKeyId>AKIAIOSFODNN7EXAMPLE</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256&#10;20130524T000000Z&#10;"
        "20130524/us-east-1/s3/aws4_request&#10;7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        "</StringToSign><CanonicalRequest>GET&#xA;/test.txt&#xA;&#xA;host:examplebucket.s3.amazonaws.com</CanonicalRequest>"
        "<RequestId>6ZHJK1N8CVH3X9PD</RequestId><HostId>abc+def/ghi=</HostId></Error>",
        "error");
    CHECK(sig.child_text("Code") == "SignatureDoesNotMatch");
    CHECK(sig.child_text("StringToSign") ==
          "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
          "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK(sig.child_text("CanonicalRequest") == "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com");
}

TEST_CASE("xml: entities and character references") {
    CHECK(parse_xml("<a>&amp;&lt;&gt;&quot;&apos;</a>", "x").text == "&<>\"'");
    CHECK(parse_xml("<a>&#x20AC;</a>", "x").text == "\xE2\x82\xAC");   // €
    CHECK(parse_xml("<a>&#8364;</a>", "x").text == "\xE2\x82\xAC");
    CHECK(parse_xml("<a>&#x20ac;</a>", "x").text == "\xE2\x82\xAC");   // lower-case hex digits
    CHECK(parse_xml("<a>&#65;&#x42;&#x0043;</a>", "x").text == "ABC");
    CHECK(parse_xml("<a>&#xE9;</a>", "x").text == "\xC3\xA9");         // é: two bytes
    CHECK(parse_xml("<a>&#x7FF;&#x800;</a>", "x").text == "\xDF\xBF\xE0\xA0\x80");
    CHECK(parse_xml("<a>&#xFFFD;</a>", "x").text == "\xEF\xBF\xBD");
    CHECK(parse_xml("<a>&#x1F600;</a>", "x").text == "\xF0\x9F\x98\x80");  // 😀: four bytes
    CHECK(parse_xml("<a>&#128512;</a>", "x").text == "\xF0\x9F\x98\x80");
    CHECK(parse_xml("<a>&#x10FFFF;</a>", "x").text == "\xF4\x8F\xBF\xBF");
    CHECK(parse_xml("<a>&#9;&#10;&#13;</a>", "x").text == "\t\n\r");
    CHECK(parse_xml("<a>x &amp;amp; y</a>", "x").text == "x &amp; y");  // decoded once
    // UTF-8 passes through as bytes, in text and in names.
    CHECK(parse_xml("<Key>日本語/ü.txt</Key>", "x").text == "日本語/ü.txt");
    CHECK(parse_xml("<ключ>v</ключ>", "x").name == "ключ");

    CHECK(xml_error("<a>&#0;</a>").find("code point XML forbids") != std::string::npos);
    CHECK(xml_error("<a>&#xD800;</a>").find("code point XML forbids") != std::string::npos);
    CHECK(xml_error("<a>&#xDFFF;</a>").find("code point XML forbids") != std::string::npos);
    CHECK(xml_error("<a>&#x110000;</a>").find("beyond U+10FFFF") != std::string::npos);
    CHECK(xml_error("<a>&#9999999;</a>").find("beyond U+10FFFF") != std::string::npos);
    CHECK(xml_error("<a>&#99999999999;</a>").find("unterminated entity reference") != std::string::npos);  // > 12 bytes
    CHECK(xml_error("<a>&#x;</a>").find("empty character reference") != std::string::npos);
    CHECK(xml_error("<a>&#12a;</a>").find("bad character reference") != std::string::npos);
    CHECK(xml_error("<a>&#xG1;</a>").find("bad character reference") != std::string::npos);
    CHECK(xml_error("<a>&#X41;</a>").find("bad character reference") != std::string::npos);  // XML's x is lower-case
    CHECK(xml_error("<a>&amp</a>").find("unterminated entity reference") != std::string::npos);
    CHECK(xml_error("<a>a & b</a>;").find("malformed XML") != std::string::npos);
    CHECK(xml_error("<a>&;</a>").find("undefined entity '&;'") != std::string::npos);
    CHECK(xml_error("<a>&#;</a>").find("malformed XML") != std::string::npos);
}

TEST_CASE("xml: CDATA, comments, processing instructions, attributes, self-closing elements") {
    CHECK(parse_xml("<a><![CDATA[<b>&amp; ]] ]]></a>", "x").text == "<b>&amp; ]] ");
    CHECK(parse_xml("<a>x<![CDATA[]]>y</a>", "x").text == "xy");
    CHECK(parse_xml("<a>1<!-- <b>not</b> & -->2</a>", "x").text == "12");
    CHECK(parse_xml("<a>1<!-- <b>not</b> & -->2</a>", "x").children.empty());
    CHECK(parse_xml("<a>1<?pi stuff?>2</a>", "x").text == "12");
    const XmlElement d = parse_xml(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\r\n<!-- made by S3 -->\n"
        "<?xml-stylesheet href=\"s.xsl\"?>\n<r/>\n<!-- trailer -->\n  ",
        "x");
    CHECK(d.name == "r");
    CHECK(d.children.empty());
    CHECK(d.text.empty());

    // Attributes are read past and dropped: both quotes, spaces around '=', '>' and '/' inside values.
    const XmlElement a = parse_xml("<r xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\" a = 'x>y' b=\"1/2\" >t<c d='e'/></r>", "x");
    CHECK(a.name == "r");
    CHECK(a.text == "t");
    REQUIRE(a.children.size() == 1);
    CHECK(a.children[0].name == "c");
    CHECK(a.children[0].text.empty());
    CHECK(parse_xml("<r\n\txmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"\n/>", "x").name == "r");
    CHECK(xml_error("<r a=\"<\"/>").find("'<' in an attribute value") != std::string::npos);
    CHECK(xml_error("<r a=b/>").find("expected a quoted attribute value") != std::string::npos);
    CHECK(xml_error("<r a/>").find("expected '=' after an attribute name") != std::string::npos);
    CHECK(xml_error("<r a=\"1/>").find("unterminated attribute value") != std::string::npos);
    CHECK(xml_error("<r/ >").find("expected '/>'") != std::string::npos);

    // Nested children, text around them, and a closing tag with spaces.
    const XmlElement n = parse_xml("<a>x<b>1</b>y<b>2<c/></b >z</a>", "x");
    CHECK(n.text == "xyz");
    REQUIRE(n.all("b").size() == 2);
    CHECK(n.all("b")[1]->text == "2");
    CHECK(n.all("b")[1]->children.size() == 1);
    // Whitespace and control characters in text are kept byte for byte (no line-end normalisation).
    CHECK(parse_xml("<a> \t x\r\n y </a>", "x").text == " \t x\r\n y ");
}

TEST_CASE("xml: errors name the document, the problem and the byte offset") {
    CHECK(xml_error("<a><b>x</b>") == "doc: malformed XML: unterminated element <a> at byte 11");
    CHECK(xml_error("<a><b></a>") == "doc: malformed XML: </a> closes <b> at byte 9");
    CHECK(xml_error("<a>x&nbsp;</a>") == "doc: malformed XML: undefined entity '&nbsp;' at byte 4");
    CHECK(xml_error("<?xml version=\"1.0\"?><!DOCTYPE a [<!ENTITY e \"boom\">]><a>&e;</a>") ==
          "doc: malformed XML: DOCTYPE and declarations are not accepted at byte 21");
    CHECK(xml_error("<a><!ENTITY e \"x\"></a>") == "doc: malformed XML: declarations are not accepted inside elements at byte 3");
    CHECK(xml_error("<a/>x") == "doc: malformed XML: content after the root element at byte 4");
    CHECK(xml_error("<a></a>\n<b></b>") == "doc: malformed XML: content after the root element at byte 8");
    CHECK(xml_error("") == "doc: malformed XML: expected the root element at byte 0");
    CHECK(xml_error(" \r\n\t") == "doc: malformed XML: expected the root element at byte 4");
    CHECK(xml_error("<?xml version=\"1.0\"?>") == "doc: malformed XML: expected the root element at byte 21");
    CHECK(xml_error("text") == "doc: malformed XML: expected the root element at byte 0");
    CHECK(xml_error("<a>") == "doc: malformed XML: unterminated element <a> at byte 3");
    CHECK(xml_error("<a") == "doc: malformed XML: unterminated start tag at byte 2");
    CHECK(xml_error("<") == "doc: malformed XML: expected a name at byte 1");
    CHECK(xml_error("< a/>") == "doc: malformed XML: expected a name at byte 1");
    CHECK(xml_error("<a></") == "doc: malformed XML: expected a name at byte 5");
    CHECK(xml_error("<a></a") == "doc: malformed XML: expected '>' at byte 6");
    CHECK(xml_error("<a><!-- x </a>") == "doc: malformed XML: unterminated comment at byte 3");
    CHECK(xml_error("<a><![CDATA[x</a>") == "doc: malformed XML: unterminated CDATA section at byte 12");
    CHECK(xml_error("<?xml version=\"1.0\"") == "doc: malformed XML: unterminated processing instruction at byte 0");
    // `what` is whatever the caller names the document.
    try {
        (void)parse_xml("<Error>", "listing of s3://b/p (page 2)");
        FAIL("no error");
    } catch (const mds::Error& e) {
        CHECK(std::string(e.what()) == "listing of s3://b/p (page 2): malformed XML: unterminated element <Error> at byte 7");
    }
}

TEST_CASE("xml: nesting is bounded at 64 levels") {
    auto nested = [](int levels) {
        std::string s;
        for (int i = 0; i < levels; ++i) s += "<a>";
        s += "x";
        for (int i = 0; i < levels; ++i) s += "</a>";
        return s;
    };
    XmlElement e = parse_xml(nested(64), "x");
    int depth = 1;
    for (const XmlElement* p = &e; !p->children.empty(); p = &p->children[0]) ++depth;
    CHECK(depth == 64);
    // The 65th start tag is refused where it begins: byte 64 * 3.
    CHECK(xml_error(nested(65)) == "doc: malformed XML: nesting deeper than 64 levels at byte 192");
    // Huge inputs fail early, never on the stack: '<<<...' at its first name, 100000 open tags at depth 65.
    CHECK(xml_error(std::string(100000, '<') + "a>") == "doc: malformed XML: expected a name at byte 1");
    std::string deep;
    for (int i = 0; i < 100000; ++i) deep += "<a>";
    CHECK(xml_error(deep) == "doc: malformed XML: nesting deeper than 64 levels at byte 192");
}

TEST_CASE("xml: xml_escape round-trips through parse_xml") {
    CHECK(xml_escape("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d&quot;e&apos;f");
    CHECK(xml_escape("") == "");
    CHECK(xml_escape("plain ü") == "plain ü");
    const std::string tricky[] = {"",  "&amp;",  "]]>", "<![CDATA[x]]>", "<!-- c -->", "a\r\nb\t", std::string("\0x\x01", 3),
                                  "€", "&#x20AC;", "'\"", "   ",           "\xFF\xFE"};
    for (const std::string& t : tricky) {
        CAPTURE(t);
        CHECK(parse_xml("<a>" + xml_escape(t) + "</a>", "x").text == t);
    }
}

TEST_CASE("xml: a UTF-8 byte order mark before the document is read past") {
    const XmlElement e = parse_xml("\xEF\xBB\xBF<?xml version=\"1.0\"?><Error><Code>SlowDown</Code></Error>", "doc");
    CHECK(e.name == "Error");
    CHECK(e.child_text("Code") == "SlowDown");
}
