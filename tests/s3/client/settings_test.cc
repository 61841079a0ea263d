// ResolveSettings: the environment and the shared files ~/.aws/credentials and ~/.aws/config.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <vector>

#include "io/s3/s3_client.h"
#include "io/s3/shared_config.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::s3 {
namespace {

using testing::ScopedEnv;

// Each test starts from an environment without any variable ResolveSettings reads, and HOME in its own directory.
class S3Settings : public ::testing::Test {
 protected:
  S3Settings() : home_("s3-settings") {
    for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                             "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_MAX_ATTEMPTS",
                             "CKPT_S3_ADDRESSING", "CKPT_S3_CONNECTIONS", "CKPT_S3_PART_BYTES", "CKPT_S3_STALL_MS"}) {
      cleared_.push_back(std::make_unique<ScopedEnv>(name, nullptr));
    }
    cleared_.push_back(std::make_unique<ScopedEnv>("HOME", home_.path()));
  }

  void Set(const char* name, const std::string& value) { cleared_.push_back(std::make_unique<ScopedEnv>(name, value)); }

  // Writes ~/.aws/NAME.
  std::string WriteAws(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(home_.Path(".aws"));
    std::string path = home_.Path(".aws/" + name);
    std::ofstream(path) << text;
    return path;
  }

  testing::TempDir home_;
  std::vector<std::unique_ptr<ScopedEnv>> cleared_;
};

TEST_F(S3Settings, EnvironmentCredentialsAndDefaults) {
  Set("AWS_ACCESS_KEY_ID", "AKIAENV");
  Set("AWS_SECRET_ACCESS_KEY", "secret");
  Set("AWS_SESSION_TOKEN", "token");
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->access_key_id, "AKIAENV");
  EXPECT_EQ(settings->secret_access_key, "secret");
  EXPECT_EQ(settings->session_token, "token");
  EXPECT_EQ(settings->region, "us-east-1");
  EXPECT_EQ(settings->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(settings->addressing, Addressing::kAuto);
  EXPECT_EQ(settings->profile, "");
}

TEST_F(S3Settings, EnvironmentOverridesRegionEndpointAndTuning) {
  Set("AWS_ACCESS_KEY_ID", "k");
  Set("AWS_SECRET_ACCESS_KEY", "s");
  Set("AWS_DEFAULT_REGION", "eu-west-3");
  Set("AWS_ENDPOINT_URL", "http://wrong:1");
  Set("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9000/");
  Set("CKPT_S3_ADDRESSING", "virtual");
  Set("AWS_MAX_ATTEMPTS", "3");
  Set("CKPT_S3_CONNECTIONS", "4");
  Set("CKPT_S3_PART_BYTES", std::to_string(8 << 20));
  Set("CKPT_S3_STALL_MS", "2000");
  Set("AWS_CA_BUNDLE", "/etc/ca.pem");
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->region, "eu-west-3");
  EXPECT_EQ(settings->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(settings->addressing, Addressing::kVirtualHosted);
  EXPECT_EQ(settings->max_attempts, 3u);
  EXPECT_EQ(settings->connections, 4u);
  EXPECT_EQ(settings->part_bytes, 8u << 20);
  EXPECT_EQ(settings->stall_timeout.count(), 2000);
  EXPECT_EQ(settings->ca_bundle, "/etc/ca.pem");
}

TEST_F(S3Settings, MalformedVariablesAreRefusedByName) {
  Set("AWS_ACCESS_KEY_ID", "k");
  Set("AWS_SECRET_ACCESS_KEY", "s");
  for (auto [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"CKPT_S3_CONNECTIONS", "0"},
                                                        {"CKPT_S3_PART_BYTES", "1024"},
                                                        {"AWS_MAX_ATTEMPTS", "three"},
                                                        {"CKPT_S3_ADDRESSING", "sideways"},
                                                        {"AWS_ENDPOINT_URL", "ftp://host"},
                                                        {"AWS_ENDPOINT_URL", "http://host/path"}}) {
    ScopedEnv bad(name, value);
    Result<Settings> settings = ResolveSettings();
    ASSERT_FALSE(settings.ok()) << name << "=" << value;
    EXPECT_EQ(settings.status().code(), Code::kInvalidArgument);
    EXPECT_NE(settings.status().message().find(name), std::string::npos) << settings.status().message();
  }
}

TEST_F(S3Settings, OneCredentialVariableWithoutTheOtherIsRefused) {
  Set("AWS_ACCESS_KEY_ID", "k");
  Result<Settings> settings = ResolveSettings();
  ASSERT_FALSE(settings.ok());
  EXPECT_NE(settings.status().message().find("AWS_SECRET_ACCESS_KEY is not"), std::string::npos);
}

TEST_F(S3Settings, NoCredentialsNamesWhereItLooked) {
  Result<Settings> settings = ResolveSettings();
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.status().code(), Code::kInvalidArgument);
  EXPECT_NE(settings.status().message().find(home_.Path(".aws/credentials")), std::string::npos)
      << settings.status().message();
}

TEST_F(S3Settings, DefaultProfileFromTheSharedFiles) {
  WriteAws("credentials",
           "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n"
           "aws_session_token=tok\n");
  WriteAws("config",
           "# comment\n[default]\nregion = ap-south-1\nendpoint_url = http://localhost:7480\n"
           "s3 =\n  addressing_style = path\n");
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->access_key_id, "AKIAFILE");
  EXPECT_EQ(settings->secret_access_key, "file-secret");
  EXPECT_EQ(settings->session_token, "tok");
  EXPECT_EQ(settings->region, "ap-south-1");
  EXPECT_EQ(settings->endpoint, "http://localhost:7480");
  EXPECT_EQ(settings->addressing, Addressing::kPath);
  EXPECT_EQ(settings->profile, "default");
}

TEST_F(S3Settings, NamedProfileIsProfileNameInConfigAndNameInCredentials) {
  WriteAws("credentials",
           "[default]\naws_access_key_id = D\naws_secret_access_key = d\n"
           "[work]\naws_access_key_id = W\naws_secret_access_key = w\n");
  WriteAws("config", "[default]\nregion = us-west-1\n[profile work]\nregion = eu-north-1\n");
  Set("AWS_PROFILE", "work");
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->access_key_id, "W");
  EXPECT_EQ(settings->region, "eu-north-1");
  EXPECT_EQ(settings->endpoint, "https://s3.eu-north-1.amazonaws.com");
  EXPECT_EQ(settings->profile, "work");
}

TEST_F(S3Settings, EnvironmentCredentialsWinOverTheProfile) {
  WriteAws("credentials", "[default]\naws_access_key_id = FILE\naws_secret_access_key = f\n");
  Set("AWS_ACCESS_KEY_ID", "ENV");
  Set("AWS_SECRET_ACCESS_KEY", "e");
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->access_key_id, "ENV");
  EXPECT_EQ(settings->profile, "");
}

TEST_F(S3Settings, FilesNamedByVariablesAreRead) {
  std::string credentials = home_.Path("creds.ini");
  std::ofstream(credentials) << "[default]\naws_access_key_id = ELSEWHERE\naws_secret_access_key = x\n";
  Set("AWS_SHARED_CREDENTIALS_FILE", credentials);
  Result<Settings> settings = ResolveSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  EXPECT_EQ(settings->access_key_id, "ELSEWHERE");
}

TEST_F(S3Settings, UnknownProfileIsRefused) {
  WriteAws("credentials", "[default]\naws_access_key_id = D\naws_secret_access_key = d\n");
  Set("AWS_PROFILE", "nope");
  Result<Settings> settings = ResolveSettings();
  ASSERT_FALSE(settings.ok());
  EXPECT_NE(settings.status().message().find("AWS_PROFILE='nope'"), std::string::npos) << settings.status().message();
}

TEST_F(S3Settings, MalformedLinesAreRefusedWithFileAndLine) {
  std::string path = WriteAws("credentials", "[default]\naws_access_key_id = D\nthis line is wrong\n");
  Result<Settings> settings = ResolveSettings();
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.status().code(), Code::kInvalidArgument);
  EXPECT_NE(settings.status().message().find(path + ":3:"), std::string::npos) << settings.status().message();
}

TEST_F(S3Settings, MalformedProfileValuesNameTheirLine) {
  WriteAws("credentials", "[default]\naws_access_key_id = D\naws_secret_access_key = d\n");
  std::string path = WriteAws("config", "[default]\ns3 =\n    addressing_style = diagonal\n");
  Result<Settings> settings = ResolveSettings();
  ASSERT_FALSE(settings.ok());
  EXPECT_NE(settings.status().message().find(path + ":3"), std::string::npos) << settings.status().message();
}

TEST(S3SharedConfig, NestedBlocksEndAtTheNextUnindentedLine) {
  Result<SharedFile> file =
      ParseSharedFile("f",
                      "[profile p]\ns3 =\n  addressing_style = path\n  endpoint_url = http://x\nregion = r\n"
                      "; comment\n[empty]\n");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Profile& profile = file->at("profile p");
  EXPECT_EQ(profile.at("s3.addressing_style").value, "path");
  EXPECT_EQ(profile.at("s3.endpoint_url").value, "http://x");
  EXPECT_EQ(profile.at("s3.endpoint_url").origin, "f:4");
  EXPECT_EQ(profile.at("region").value, "r");
  EXPECT_EQ(file->count("empty"), 1u);
}

TEST(S3SharedConfig, ValuesBeforeAnySectionAreRefused) {
  Result<SharedFile> file = ParseSharedFile("f", "region = x\n");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("f:1"), std::string::npos);
}

}  // namespace
}  // namespace ckpt::s3
