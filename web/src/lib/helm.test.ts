import { describe, expect, it } from "vitest";
import { helmCommand, pemFingerprint, shellQuote } from "./helm";

describe("helmCommand", () => {
  it("stores the token in a Secret and sets the chart's hub values", () => {
    const cmd = helmCommand({
      clusterName: "prod-eu-1",
      labels: { env: "prod", "topology.kubernetes.io/region": "eu west" },
      hubURL: "https://hub.example:8443",
      caFingerprint: "sha256:abcd",
      token: "kbt_secret",
      replaceExisting: true,
    });
    expect(cmd).toContain("kubectl -n kollect-system create secret generic kollect-hub-bootstrap --from-literal=token=kbt_secret");
    expect(cmd).toContain("--set clusterName=prod-eu-1");
    expect(cmd).toContain("--set clusterLabels.env=prod");
    expect(cmd).toContain(`--set 'clusterLabels.topology\\.kubernetes\\.io/region=eu west'`);
    expect(cmd).toContain("--set hub.url=https://hub.example:8443");
    expect(cmd).toContain("--set hub.caFingerprint=sha256:abcd");
    expect(cmd).toContain("--set hub.bootstrapToken.existingSecret=kollect-hub-bootstrap");
    expect(cmd).toContain("--set hub.replaceExisting=true");
  });

  it("quotes for the shell only what needs it", () => {
    expect(shellQuote("a=b")).toBe("a=b");
    expect(shellQuote("it's")).toBe(`'it'\\''s'`);
  });
});

describe("pemFingerprint", () => {
  it("hashes the DER of the last certificate", async () => {
    // "hello" as a fake DER: sha256("hello") is well known.
    const pem = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
    expect(await pemFingerprint(pem)).toBe("sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
    await expect(pemFingerprint("nothing")).rejects.toThrow(/no certificate/);
  });
});
