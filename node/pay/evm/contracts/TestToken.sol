// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title A token for tests and the devstack, never for value
/// @notice An ERC-20 of six decimals (a micro-unit per base unit, as
/// idlegrid prices are) that anyone may mint.
contract TestToken is ERC20 {
    constructor() ERC20("idlegrid test dollar", "tUSD") {}

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
