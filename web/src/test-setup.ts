// Unmount what each test rendered (Testing Library cleans up by itself only with vitest globals).
import { cleanup } from "@testing-library/react";
import { afterEach } from "vitest";

afterEach(cleanup);
