// Where alerts go besides the report lines: e-mail over SMTP (libcurl; smtp:// with STARTTLS when
// the server offers it, or smtps://) and a user's command (chat webhooks), with the same calling
// convention as mds-train's --alert-command.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace mds::slurm {

struct MailConfig {
    std::string smtp_url = "smtp://localhost";   // smtp://host[:port] or smtps://host[:port]
    std::string from;                            // empty: <user>@<host>
    std::vector<std::string> to;
    std::string user, password;                  // SMTP AUTH, from MDS_SMTP_USER / MDS_SMTP_PASSWORD
    std::chrono::seconds timeout{60};
};

// The RFC 5322 message (headers + body, CRLF line ends). Non-ASCII subjects are encoded (RFC 2047).
std::string build_mail(const MailConfig& config, const std::string& subject, const std::string& body,
                       std::int64_t now);
// Sends one message to every recipient; returns an empty string or what went wrong (never throws).
std::string send_mail(const MailConfig& config, const std::string& subject, const std::string& body);

// Runs `/bin/sh -c COMMAND sh MESSAGE` with MDS_ALERT_MESSAGE, MDS_ALERT_SUBJECT, MDS_ALERT_LEVEL
// (ALERT, UNKNOWN or RECOVERED) and MDS_JOB_NAME in its environment and the whole report on its
// standard input; waits for it (at most `timeout`). Returns an empty string or what went wrong.
std::string run_alert_command(const std::string& command, const std::string& message, const std::string& subject,
                              const std::string& level, const std::string& job_name, const std::string& report,
                              std::chrono::seconds timeout = std::chrono::seconds(60));

// "<user>@<host>" of this process.
std::string default_mail_from();

}  // namespace mds::slurm
