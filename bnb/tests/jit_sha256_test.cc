// SHA-256 against the FIPS 180-2 / NIST example vectors, and chunked updates against one-shot hashing.
#include "bnb/jit/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                      "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ChunkedEqualsOneShot) {
  std::string msg;
  for (int i = 0; i < 1000; ++i) msg.push_back(static_cast<char>(i * 7 + 3));
  const std::string want = Sha256Hex(msg);
  for (size_t chunk : {1, 3, 55, 56, 63, 64, 65, 127, 999}) {
    Sha256 h;
    for (size_t i = 0; i < msg.size(); i += chunk) h.Update(absl::string_view(msg).substr(i, chunk));
    EXPECT_EQ(h.HexDigest(), want) << "chunk " << chunk;
  }
  // Lengths around the padding boundary.
  for (size_t n = 50; n < 70; ++n) {
    Sha256 a;
    a.Update(msg.substr(0, n));
    EXPECT_EQ(a.HexDigest(), Sha256Hex(msg.substr(0, n)));
  }
}

TEST(Sha256, Digest) {
  const auto d = Sha256Digest("abc");
  EXPECT_EQ(ToHex(d.data(), d.size()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace bnb::jit
