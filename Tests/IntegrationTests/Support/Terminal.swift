import Foundation

/// Runs a program on a pseudo-terminal of its own (python3's `pty`), answering each prompt
/// as it appears: what a person at a terminal does, without mocking the terminal. The answers
/// are typed only once their prompt has been written, in order; the result's stdout is
/// everything the program wrote to the terminal (prompts included, never echoed input).
enum PseudoTerminal {
    static let driver = """
        import json, os, pty, select, sys, time
        answers = json.loads(sys.argv[1])
        pid, fd = pty.fork()
        if pid == 0:
            os.execvpe(sys.argv[2], sys.argv[2:], os.environ)
        out = b""
        seen = 0
        i = 0
        deadline = time.time() + 60
        while time.time() < deadline:
            r, _, _ = select.select([fd], [], [], 1)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            while i < len(answers):
                at = out.find(answers[i][0].encode(), seen)
                if at < 0:
                    break
                seen = at + len(answers[i][0])
                os.write(fd, (answers[i][1] + "\\n").encode())
                i += 1
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(out)
        sys.exit(os.waitstatus_to_exitcode(status))
        """

    /// `arguments` run on a terminal; each (prompt, answer) pair types `answer` and Enter once
    /// `prompt` has appeared.
    static func run(_ d: Daemon, _ tool: String, _ arguments: [String], answers: [(String, String)])
        -> ProcessResult
    {
        let json = String(
            decoding: try! JSONSerialization.data(withJSONObject: answers.map { [$0.0, $0.1] }),
            as: UTF8.self)
        return d.run("python3", ["-c", driver, json, Paths.tool(tool)] + arguments, timeout: 90)
    }
}
